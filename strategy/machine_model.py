"""Machine models under a short import path (strategy.machine_model); the code lives in
strategy/machines/."""
from .machines import (DEVICE_SPECS, HOST_KINDS, LINK_KINDS, PRESETS, DeviceSpec, HostCost,
                       Link, LinkSpec,
                       MachineFileError, MachineModel, MachineModelError, NodeType,
                       calibrate_local, cluster_model, from_bytes, from_dict, load,
                       machine_model, save, to_dict)

__all__ = ["DEVICE_SPECS", "HOST_KINDS", "LINK_KINDS", "PRESETS", "DeviceSpec", "HostCost",
           "Link", "LinkSpec",
           "MachineFileError", "MachineModel", "MachineModelError", "NodeType",
           "calibrate_local", "cluster_model", "from_bytes", "from_dict", "load",
           "machine_model", "save", "to_dict"]
