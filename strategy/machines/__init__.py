"""Machine models: devices, links, routes, transfer and all-reduce costs; presets, machine
files and calibration of the local machine. See docs/machines.md."""
from .calibrate import calibrate_local
from .errors import MachineFileError, MachineModelError
from .fileformat import from_bytes, from_dict, load, save, to_dict
from .model import MachineModel
from .presets import (PRESETS, cluster_model, dgx1, dgx_a100, dgx_h100, dgx_h200, k80_cluster,
                      machine_model, p100_cluster, presets_text)
from .specs import (DEVICE_SPECS, HOST_KINDS, LINK_KINDS, DeviceSpec, HostCost, Link,
                    LinkSpec, NodeType)

__all__ = ["calibrate_local", "MachineFileError", "MachineModelError", "from_bytes",
           "from_dict", "load", "save", "to_dict", "MachineModel", "PRESETS", "cluster_model",
           "dgx1", "dgx_a100", "dgx_h100", "dgx_h200", "k80_cluster", "machine_model",
           "p100_cluster", "presets_text", "DEVICE_SPECS", "HOST_KINDS", "LINK_KINDS", "DeviceSpec", "HostCost",
           "Link", "LinkSpec", "NodeType"]
