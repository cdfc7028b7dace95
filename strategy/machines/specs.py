"""Value types of machine models: a device kind's speeds (DeviceSpec), a link as the simulator
sees it (Link), and the descriptions a model is built from (LinkSpec, NodeType), plus the
datasheet table of the GPUs the presets use. Sources of every number: docs/machines.md.
"""
from __future__ import annotations

from dataclasses import dataclass

# Link kinds. "shm" joins ranks of one machine (calibrated MPI), "host" a PCIe tree to the
# CPU's root port (host memory and, usually, the NIC), "pcie_switch" two PCIe switches.
LINK_KINDS = ("nvlink", "pcie", "pcie_switch", "host", "ib", "nic", "shm")

GiB = 1 << 30


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """Peak speeds of one device kind. FLOP/s are datasheet peaks (tensor cores where they
    exist, dense); a calibrated "cpu" spec holds measured speeds instead."""
    kind: str
    fp32_flops: float          # float32 FLOP/s
    fp16_flops: float          # float16/bfloat16 FLOP/s
    fp64_flops: float          # float64 FLOP/s
    memory_bandwidth: float    # bytes/s of device memory
    memory_capacity: int       # bytes of device memory
    launch_overhead: float     # seconds per kernel launch (per op on a CPU)

    def peak_flops(self, dtype="float32") -> float:
        """Peak FLOP/s for a dtype name ("float32", "bfloat16", ...) or a torch dtype."""
        name = str(dtype).removeprefix("torch.")
        if name in ("float16", "bfloat16", "half"):
            return self.fp16_flops
        if name in ("float64", "double"):
            return self.fp64_flops
        return self.fp32_flops

    def __str__(self) -> str:
        return (f"{self.kind} {self.fp32_flops / 1e12:.3g}/{self.fp16_flops / 1e12:.3g} "
                f"TFLOP/s fp32/fp16, {self.memory_bandwidth / 1e9:.4g} GB/s, "
                f"{self.memory_capacity / GiB:.3g} GiB")


@dataclass(frozen=True, slots=True)
class Link:
    """One direction of a physical link (both directions for a half-duplex one).

    `name` is unique per resource: transfers over links with the same name share it (the
    simulator serializes them, FIFO). A model returns one Link object per name, so Links
    can key resources directly. Duplex links end in ">" (ends[0] to ends[1]) or "<"."""
    name: str
    kind: str
    latency: float             # seconds
    bandwidth: float           # bytes/s
    src: str = ""              # endpoint names, e.g. "n0/d1", "n0/host", "fabric"
    dst: str = ""

    def __str__(self) -> str:
        return f"{self.name} ({self.kind}, {self.bandwidth / 1e9:.4g} GB/s, " \
               f"{self.latency * 1e6:.3g} us)"


@dataclass(frozen=True, slots=True)
class LinkSpec:
    """A link as written in a machine description: between two endpoint names, both
    directions (duplex: each direction its own resource; else one shared resource)."""
    kind: str
    ends: tuple[str, str]
    latency: float
    bandwidth: float
    duplex: bool = True
    name: str = ""


@dataclass(frozen=True, slots=True)
class NodeType:
    """What every node of one type holds: devices by kind (local names d0, d1, ...), named
    points (switches, host, NICs) and the links among them and to global switches."""
    devices: tuple[str, ...]
    points: tuple[str, ...] = ()
    links: tuple[LinkSpec, ...] = ()


# What the host thread that issues a node does, by node kind (docs/simulator.md): run a task
# ("task"), a copy within one process ("copy"), pack and send ("send") or unpack
# ("recv") a message between processes, a reduction ("reduce"), start an all-reduce
# ("allreduce_start") and finish it ("allreduce_wait").
HOST_KINDS = ("task", "copy", "send", "recv", "reduce", "allreduce_start", "allreduce_wait")


@dataclass(frozen=True, slots=True)
class HostCost:
    """Host time of one node kind: `seconds` per node plus `per_byte` seconds per byte the
    node moves (packing a message). Zero in the presets (a C++ runtime's microseconds are
    folded into launch_overhead); measured by `python -m strategy calibrate`."""
    seconds: float = 0.0
    per_byte: float = 0.0

    def time(self, nbytes: int = 0) -> float:
        return self.seconds + self.per_byte * nbytes


def _spec(kind, fp32, fp16, fp64, bw, mem_gib, launch=5e-6) -> DeviceSpec:
    return DeviceSpec(kind, fp32 * 1e12, fp16 * 1e12, fp64 * 1e12, bw * 1e9, mem_gib * GiB,
                      launch)


# Datasheet peaks (TFLOP/s fp32, fp16/bf16, fp64; GB/s; GiB). K80 is one GK210 die (half a
# board), which is what CUDA shows as one device and what the paper counts as one GPU.
DEVICE_SPECS: dict[str, DeviceSpec] = {s.kind: s for s in (
    _spec("K80", 4.365, 4.365, 1.455, 240, 12),
    _spec("P100", 10.6, 21.2, 5.3, 732, 16),
    _spec("V100", 15.7, 125, 7.8, 900, 32),
    _spec("A100", 19.5, 312, 19.5, 2039, 80),
    _spec("H100", 67, 989, 67, 3350, 80),
    _spec("H200", 67, 989, 67, 4800, 141),
)}
