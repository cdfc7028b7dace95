"""SharedDevices: K logical devices on every device of a machine model, as a run with
`--devices-per-rank K` places them (tests and CPU demos run several logical devices in one
process, so `local` calibrated in one process has one device but the run has K).

The view answers the simulator's questions (device, compute_resource, path, transfer_time,
transfer_line, allreduce_time, links_of_allreduce, taskrt_machine) for logical device ids:
  compute    the K logical devices of a device share its compute resource, so their tasks
             run one after another, as they do in one process;
  copies     between logical devices of one device have no links: the simulator times them
             as memory copies on that device;
  all-reduce the host devices' all-reduce (if more than one) plus, on each device holding
             several members, summing them and copying the sum back: 2k x bytes at memory
             bandwidth, occupying that device's compute;
  memory     each logical device gets 1/K of its device's capacity (they share it);
  host       one process drives the K logical devices: they share its host thread and the
             model's host costs.
Owns no simulation: strategy/simulator.py times nodes with it like with any model.
"""
from __future__ import annotations

import dataclasses

from .machines import MachineModelError


class SharedDevices:
    """`per_device` logical devices on each device of `model` (ids host * K + k)."""

    def __init__(self, model, per_device: int):
        if isinstance(per_device, bool) or not isinstance(per_device, int) or per_device < 1:
            raise MachineModelError(f"SharedDevices: {per_device!r} logical devices per "
                                    "device; use a whole number of at least 1")
        self.model, self.per_device = model, per_device
        self._specs = {}

    # -- what the simulator and reports read --------------------------------------------------
    @property
    def name(self) -> str:
        return self.model.name

    @property
    def num_devices(self) -> int:
        return self.model.num_devices * self.per_device

    @property
    def devices_per_node(self) -> int:
        """Logical devices per node (what the experts place by)."""
        return self.model.devices_per_node * self.per_device

    def host(self, i: int) -> int:
        """The model device logical device i runs on."""
        if not 0 <= i < self.num_devices:
            raise MachineModelError(f"machine '{self.name}' with {self.per_device} logical "
                                    f"devices per device: device {i!r} does not exist; it "
                                    f"has devices 0..{self.num_devices - 1}")
        return i // self.per_device

    def device(self, i: int):
        h = self.host(i)
        spec = self.model.device(h)
        shared = self._specs.get(spec)
        if shared is None:
            shared = self._specs[spec] = dataclasses.replace(
                spec, memory_capacity=spec.memory_capacity // self.per_device)
        return shared

    def compute_resource(self, i: int) -> str:
        return f"compute {self.model.device_name(self.host(i))}"

    def host_resource(self, i: int) -> str:
        return self.model.host_resource(self.host(i))

    @property
    def host_costs(self) -> dict:
        return self.model.host_costs

    def path(self, a: int, b: int) -> tuple:
        ha, hb = self.host(a), self.host(b)
        return () if ha == hb else self.model.path(ha, hb)

    def transfer_time(self, nbytes: int, a: int, b: int) -> float:
        ha, hb = self.host(a), self.host(b)
        return 0.0 if ha == hb else self.model.transfer_time(nbytes, ha, hb)

    def transfer_line(self, a: int, b: int) -> tuple:
        """(path(a, b), latency, bandwidth): MachineModel.transfer_line of the hosts'."""
        ha, hb = self.host(a), self.host(b)
        return ((), 0.0, float("inf")) if ha == hb else self.model.transfer_line(ha, hb)

    def _members(self, devices) -> dict[int, int]:
        count: dict[int, int] = {}
        for d in set(devices):
            h = self.host(d)
            count[h] = count.get(h, 0) + 1
        return count

    def allreduce_time(self, nbytes: int, devices) -> float:
        count = self._members(devices)
        hosts = sorted(count)
        t = self.model.allreduce_time(nbytes, hosts) if len(hosts) > 1 else 0.0
        local = [h for h, k in count.items() if k > 1]
        if local:
            t += max(self.model.device(h).launch_overhead +
                     2 * count[h] * nbytes / self.model.device(h).memory_bandwidth
                     for h in local)
        return t

    def links_of_allreduce(self, devices, nbytes: int | None = None) -> tuple:
        count = self._members(devices)
        hosts = sorted(count)
        links = tuple(self.model.links_of_allreduce(hosts, nbytes)) if len(hosts) > 1 else ()
        return links + tuple(f"compute {self.model.device_name(h)}"
                             for h in hosts if count[h] > 1)

    def taskrt_machine(self):
        """The runtime's Machine: each model device's rank owns its K logical devices."""
        from taskrt.machine import Device, Machine
        base = self.model.taskrt_machine()
        devices = []
        for b in base.devices:
            for k in range(self.per_device):
                devices.append(Device(len(devices), b.rank, b.kind,
                                      b.index if b.kind == "cuda" else k))
        return Machine(tuple(devices))

    def __str__(self) -> str:
        return f"{self.model} with {self.per_device} logical devices per device"


def shared(model, per_device: int):
    """`model` itself for one device per device, else its SharedDevices view."""
    return model if per_device == 1 else SharedDevices(model, per_device)
