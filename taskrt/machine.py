"""Machine: the global list of devices, grouped by rank.

A device is identified everywhere by its global integer id. Several logical devices may
share one rank and even one torch device (tests run 4 logical CPU devices in one process).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .errors import MappingError


@dataclass(frozen=True, slots=True)
class Device:
    id: int          # global id, the index in Machine.devices
    rank: int        # MPI rank that owns it
    kind: str        # "cpu" or "cuda"
    index: int       # CUDA ordinal for "cuda"; logical index within the rank for "cpu"

    @property
    def torch_device(self) -> str:
        return f"cuda:{self.index}" if self.kind == "cuda" else "cpu"

    def __str__(self) -> str:
        return f"{self.kind}{self.index}@r{self.rank}"


@dataclass(frozen=True)
class Machine:
    devices: tuple[Device, ...]

    def __post_init__(self):
        for i, d in enumerate(self.devices):
            if d.id != i:
                raise MappingError(f"Machine: device at position {i} has id {d.id}. "
                                   "Device ids must be 0..n-1 in order.")
        if not self.devices:
            raise MappingError("Machine: no devices. Give at least one.")

    @staticmethod
    def local(num_devices: int = 1, kind: str = "cpu", num_gpus: int | None = None) -> "Machine":
        """One rank with `num_devices` logical devices. For kind='cuda' they use CUDA ordinals
        0.., wrapping around `num_gpus` GPUs when given (several logical devices per GPU)."""
        return Machine.grid(1, num_devices, kind, num_gpus)

    @staticmethod
    def grid(num_ranks: int, devices_per_rank: int, kind: str = "cpu",
             num_gpus: int | None = None) -> "Machine":
        """`num_ranks` ranks with `devices_per_rank` devices each, numbered rank-major."""
        devs = []
        for r in range(num_ranks):
            for k in range(devices_per_rank):
                index = k % num_gpus if (kind == "cuda" and num_gpus) else k
                devs.append(Device(len(devs), r, kind, index))
        return Machine(tuple(devs))

    def __len__(self) -> int:
        return len(self.devices)

    def __getitem__(self, device_id: int) -> Device:
        if not 0 <= device_id < len(self.devices):
            raise MappingError(f"Machine: device {device_id} does not exist; this machine has "
                               f"devices 0..{len(self.devices) - 1}.")
        return self.devices[device_id]

    @property
    def num_ranks(self) -> int:
        return max(d.rank for d in self.devices) + 1

    def devices_of_rank(self, rank: int) -> list[int]:
        return [d.id for d in self.devices if d.rank == rank]

    def __str__(self) -> str:
        return f"Machine({len(self.devices)} devices on {self.num_ranks} ranks)"


def check_device_list(where: str, devices: Sequence[int], machine: Machine) -> None:
    """Raise MappingError when a device list names devices the machine lacks."""
    bad = [d for d in devices if not (isinstance(d, int) and 0 <= d < len(machine.devices))]
    if bad:
        raise MappingError(f"{where}: devices {bad} do not exist on {machine} "
                           f"(valid ids 0..{len(machine.devices) - 1}). Use ids in that range.")
