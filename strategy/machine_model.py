"""Machine models, by the name issue 6 gives them; the code lives in strategy/machines/."""
from .machines import (DEVICE_SPECS, LINK_KINDS, PRESETS, DeviceSpec, Link, LinkSpec,
                       MachineFileError, MachineModel, MachineModelError, NodeType,
                       calibrate_local, cluster_model, from_bytes, from_dict, load,
                       machine_model, save, to_dict)

__all__ = ["DEVICE_SPECS", "LINK_KINDS", "PRESETS", "DeviceSpec", "Link", "LinkSpec",
           "MachineFileError", "MachineModel", "MachineModelError", "NodeType",
           "calibrate_local", "cluster_model", "from_bytes", "from_dict", "load",
           "machine_model", "save", "to_dict"]
