"""Several logical devices per rank: a machine model whose ranks each drive k devices that
share the rank's one compute unit (`--devices-per-rank k` on CPUs).

Such a rank runs its devices' nodes one at a time (the executors run a rank's nodes in id
order on one thread), so the simulator must not overlap them: every logical device of a
rank maps to the rank's compute resource (`compute_resource`, which the simulator asks
for). Copies between devices of one rank are memory copies on that resource (no path), an
all-reduce among them is a local sum; between ranks the base model's links and collectives
apply. Device i is logical device i % k of rank i // k, the order `discover_machine` and
`Machine.local` number them in.

    m = shared_devices(calibrate_local(), 2)     # one process, --devices-per-rank 2
    simulate(graph, m, costs)
"""
from __future__ import annotations

import dataclasses

from .errors import MachineModelError


class SharedDeviceModel:
    """A MachineModel view with `per_rank` logical devices on each device of `base`."""

    def __init__(self, base, per_rank: int):
        if isinstance(per_rank, bool) or not isinstance(per_rank, int) or per_rank < 1:
            raise MachineModelError(f"shared_devices: per_rank={per_rank!r}; use 1 or more "
                                    "logical devices per rank")
        self.base, self.per_rank = base, per_rank
        self.name = base.name
        self.num_devices = base.num_devices * per_rank
        self._specs = {}

    def rank_of(self, device: int) -> int:
        if not 0 <= device < self.num_devices:
            raise MachineModelError(f"machine '{self.name}': device {device} does not exist "
                                    f"(devices 0..{self.num_devices - 1})")
        return device // self.per_rank

    def device(self, i: int):
        """The rank's spec with its memory divided among its logical devices."""
        spec = self._specs.get(i)
        if spec is None:
            base = self.base.device(self.rank_of(i))
            spec = self._specs[i] = dataclasses.replace(
                base, memory_capacity=base.memory_capacity // self.per_rank)
        return spec

    def compute_resource(self, i: int) -> str:
        return f"rank {self.rank_of(i)}"

    def _ranks(self, devices) -> list[int]:
        return sorted({self.rank_of(d) for d in devices})

    def path(self, a: int, b: int) -> tuple:
        ra, rb = self.rank_of(a), self.rank_of(b)
        return () if ra == rb else self.base.path(ra, rb)

    def transfer_time(self, nbytes: int, a: int, b: int) -> float:
        ra, rb = self.rank_of(a), self.rank_of(b)
        if ra == rb:
            return 0.0 if a == b else self._local_time(2 * nbytes, 1, a)
        return self.base.transfer_time(nbytes, ra, rb)

    def _local_time(self, nbytes: float, ops: int, device: int) -> float:
        spec = self.device(device)
        return ops * spec.launch_overhead + nbytes / spec.memory_bandwidth

    def allreduce_time(self, nbytes: int, devices) -> float:
        """Local sums in every rank (read each part, write each result), then the base
        model's all-reduce among the ranks."""
        devices = sorted(set(devices))
        if len(devices) < 2:
            return 0.0
        per = max(sum(1 for d in devices if self.rank_of(d) == r) for r in self._ranks(devices))
        local = self._local_time((2 * per + 1) * nbytes, 2 * per, devices[0]) if per > 1 else 0.0
        ranks = self._ranks(devices)
        return local + (self.base.allreduce_time(nbytes, ranks) if len(ranks) > 1 else 0.0)

    def links_of_allreduce(self, devices, nbytes: int | None = None) -> tuple:
        ranks = self._ranks(devices)
        return self.base.links_of_allreduce(ranks, nbytes) if len(ranks) > 1 else ()

    def taskrt_machine(self):
        from taskrt.machine import Device, Machine
        return Machine(tuple(
            Device(i, i // self.per_rank,
                   "cpu" if self.device(i).kind == "cpu" else "cuda", i % self.per_rank)
            for i in range(self.num_devices)))

    def __str__(self) -> str:
        return f"{self.base} with {self.per_rank} logical devices per rank"


def shared_devices(model, per_rank: int):
    """`model` with `per_rank` logical devices per device (see the module doc); the model
    itself when per_rank is 1."""
    return model if per_rank == 1 else SharedDeviceModel(model, per_rank)
