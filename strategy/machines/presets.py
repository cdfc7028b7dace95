"""Preset machines by name: the paper's P100 and K80 clusters, DGX-style V100/A100/H100/H200
nodes, any number of nodes of each, and `cluster_model` for simple uniform machines (what
calibration builds). `machine_model(spec)` also loads files and calibrates "local".

Numbers are datasheet values; docs/machines.md cites them and says what is simplified.
Bandwidths are per direction; every link is full duplex (each direction its own resource).
"""
from __future__ import annotations

import difflib
import os
from typing import Callable, Sequence

from .errors import MachineModelError
from .model import MachineModel
from .specs import DEVICE_SPECS, DeviceSpec, LinkSpec, NodeType

PCIE3, PCIE4, PCIE5 = 15.75e9, 31.5e9, 63.0e9       # x16, bytes/s per direction


def gbit(rate: float) -> float:
    """Bytes/s of a link of `rate` Gb/s."""
    return rate * 1e9 / 8


# Per-hop latencies: FlexFlow's example machine file uses 1 us for NVLink and PCIe and
# 0.5 us for the NIC. An NVSwitch route has two hops (in and out of the switch), 0.5 us each.
LAT_NVLINK, LAT_NVSWITCH, LAT_PCIE, LAT_IB = 1e-6, 0.5e-6, 1e-6, 0.5e-6


def _pairs(n: int):
    return [(i, j) for i in range(n) for j in range(i + 1, n)]


def _build(name: str, kind: str, nodes: int, links: list[LinkSpec], points: Sequence[str],
           per_node: int, summary: str) -> MachineModel:
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise MachineModelError(f"machine '{name}': {nodes!r} nodes; give a whole number of "
                                f"at least 1, e.g. '{name}:2'")
    node = NodeType((kind,) * per_node, tuple(points), tuple(links))
    return MachineModel(f"{name}:{nodes}", {kind: DEVICE_SPECS[kind]}, {name: node},
                        [name] * nodes, ("fabric",), summary=summary)


def p100_cluster(nodes: int = 4) -> MachineModel:
    """The paper's P100 cluster: nodes of 4 P100 joined pairwise by NVLink (one 20 GB/s
    NVLink 1.0 link per pair), each on PCIe 3.0 to the host, 100 Gb/s EDR between nodes."""
    links = [LinkSpec("nvlink", (f"d{i}", f"d{j}"), LAT_NVLINK, 20e9) for i, j in _pairs(4)]
    links += [LinkSpec("pcie", (f"d{i}", "host"), LAT_PCIE, PCIE3) for i in range(4)]
    links.append(LinkSpec("ib", ("host", "fabric"), LAT_IB, gbit(100)))
    return _build("p100", "P100", nodes, links, ["host"], 4, "NVLink, 100 Gb/s EDR")


def k80_cluster(nodes: int = 16) -> MachineModel:
    """The paper's K80 cluster: nodes of 4 K80 dies; dies d0,d1 share PCIe switch sw0 and
    d2,d3 share sw1 (a K80 board's own switch); both switches reach the CPU through one shared
    PCIe switch; 56 Gb/s FDR InfiniBand between nodes. All PCIe links are 3.0 x16."""
    links = [LinkSpec("pcie", (f"d{i}", f"sw{i // 2}"), LAT_PCIE, PCIE3) for i in range(4)]
    links += [LinkSpec("pcie_switch", (f"sw{j}", "shared"), LAT_PCIE, PCIE3) for j in range(2)]
    links.append(LinkSpec("host", ("shared", "host"), LAT_PCIE, PCIE3))
    links.append(LinkSpec("ib", ("host", "fabric"), LAT_IB, gbit(56)))
    return _build("k80", "K80", nodes, links, ["sw0", "sw1", "shared", "host"], 4,
                  "PCIe switches, 56 Gb/s FDR")


def dgx1(nodes: int = 1) -> MachineModel:
    """DGX-1 with 8 V100. Simplified: every pair of GPUs has one NVLink 2.0 link (25 GB/s;
    the real hybrid cube mesh gives 4 neighbours 25-50 GB/s and 3 GPUs none). GPUs 2j, 2j+1
    share PCIe switch swj with one 100 Gb/s EDR NIC."""
    links = [LinkSpec("nvlink", (f"d{i}", f"d{j}"), LAT_NVLINK, 25e9) for i, j in _pairs(8)]
    links += [LinkSpec("pcie", (f"d{i}", f"sw{i // 2}"), LAT_PCIE, PCIE3) for i in range(8)]
    links += [LinkSpec("ib", (f"sw{j}", "fabric"), LAT_IB, gbit(100)) for j in range(4)]
    return _build("dgx1", "V100", nodes, links, [f"sw{j}" for j in range(4)], 8,
                  "NVLink 25 GB/s per pair, 4x100 Gb/s EDR")


def _dgx_nvswitch(name: str, kind: str, nodes: int, nvlink: float, pcie: float,
                  nic_gbit: float, summary: str) -> MachineModel:
    links = [LinkSpec("nvlink", (f"d{i}", "nvswitch"), LAT_NVSWITCH, nvlink) for i in range(8)]
    links += [LinkSpec("pcie", (f"d{i}", f"nic{i}"), LAT_PCIE, pcie) for i in range(8)]
    links += [LinkSpec("ib", (f"nic{i}", "fabric"), LAT_IB, gbit(nic_gbit)) for i in range(8)]
    return _build(name, kind, nodes, links, ["nvswitch"] + [f"nic{i}" for i in range(8)], 8,
                  summary)


def dgx_a100(nodes: int = 1) -> MachineModel:
    """DGX A100: 8 A100 on NVSwitch (600 GB/s per GPU both ways, 300 each way), one 200 Gb/s
    HDR NIC per GPU on PCIe 4.0."""
    return _dgx_nvswitch("dgx-a100", "A100", nodes, 300e9, PCIE4, 200,
                         "NVSwitch 600 GB/s, 8x200 Gb/s HDR")


def dgx_a100_40gb(nodes: int = 1) -> MachineModel:
    """The first DGX A100: 8 A100-SXM4-40GB (1,555 GB/s HBM2), otherwise as dgx-a100."""
    return _dgx_nvswitch("dgx-a100-40gb", "A100-40GB", nodes, 300e9, PCIE4, 200,
                         "A100 40GB, NVSwitch 600 GB/s, 8x200 Gb/s HDR")


def selene(nodes: int = 4) -> MachineModel:
    """NVIDIA Selene as in Narayanan et al. (SC'21): DGX A100 nodes of 8 A100-SXM4-80GB on
    NVSwitch (600 GB/s per GPU both ways), 8 compute ConnectX-6 HDR NICs (200 Gb/s each,
    one per GPU on PCIe 4.0) into a non-blocking fat tree (the "fabric" switch). Datasheet
    numbers only, the same as dgx-a100; default 4 nodes (32 GPUs), selene:16 is 128 GPUs."""
    return _dgx_nvswitch("selene", "A100", nodes, 300e9, PCIE4, 200,
                         "DGX A100 80GB nodes, NVSwitch 600 GB/s, 8x200 Gb/s HDR fat tree")


def dgx_h100(nodes: int = 1) -> MachineModel:
    """DGX H100: 8 H100 on NVSwitch (900 GB/s per GPU both ways), one 400 Gb/s NDR NIC per
    GPU on PCIe 5.0."""
    return _dgx_nvswitch("dgx-h100", "H100", nodes, 450e9, PCIE5, 400,
                         "NVSwitch 900 GB/s, 8x400 Gb/s NDR")


def dgx_h200(nodes: int = 1) -> MachineModel:
    """DGX H200: as DGX H100 with H200 GPUs."""
    return _dgx_nvswitch("dgx-h200", "H200", nodes, 450e9, PCIE5, 400,
                         "NVSwitch 900 GB/s, 8x400 Gb/s NDR")


def cluster_model(name: str, spec: DeviceSpec, devices_per_node: int | Sequence[int],
                  intra: tuple[str, float, float] = ("shm", 5e-6, 3e9),
                  inter: tuple[str, float, float] = ("nic", 10e-6, 1e9), nodes: int = 1,
                  allreduce_efficiency: float = 1.0, summary: str = "",
                  calibration: dict | None = None) -> MachineModel:
    """A uniform machine with easy closed forms: the devices of a node are joined pairwise
    by `intra` = (kind, latency, bandwidth) links; across nodes a transfer takes exactly
    `inter`'s latency and bandwidth (device -> host at zero latency and the device's memory
    bandwidth, then half of `inter`'s latency out of one node's NIC and half into the other).

        cluster_model("toy", spec, 2, nodes=2)    # 2 nodes x 2 devices
    """
    sizes = [devices_per_node] * nodes if isinstance(devices_per_node, int) \
        else list(devices_per_node)
    types, order = {}, []
    for m in sizes:
        tname = f"node{m}"
        order.append(tname)
        if tname in types:
            continue
        links = [LinkSpec(intra[0], (f"d{i}", f"d{j}"), intra[1], intra[2])
                 for i, j in _pairs(m)]
        points = ()
        if len(sizes) > 1:
            points = ("host",)
            links += [LinkSpec("host", (f"d{i}", "host"), 0.0, spec.memory_bandwidth)
                      for i in range(m)]
            links.append(LinkSpec(inter[0], ("host", "fabric"), inter[1] / 2, inter[2]))
        types[tname] = NodeType((spec.kind,) * m, points, tuple(links))
    return MachineModel(name, {spec.kind: spec}, types, order,
                        ("fabric",) if len(sizes) > 1 else (), (), allreduce_efficiency,
                        summary, calibration)


PRESETS: dict[str, tuple[Callable[[int], MachineModel], int, str]] = {
    "p100": (p100_cluster, 4, "the paper's P100 cluster: 4 nodes x 4 P100, NVLink, EDR"),
    "k80": (k80_cluster, 16, "the paper's K80 cluster: 16 nodes x 4 K80, PCIe, FDR"),
    "dgx1": (dgx1, 1, "DGX-1: 8 V100, NVLink, 4 EDR NICs per node"),
    "dgx-a100": (dgx_a100, 1, "DGX A100: 8 A100, NVSwitch, 8 HDR NICs per node"),
    "dgx-a100-40gb": (dgx_a100_40gb, 1, "DGX A100 40GB: 8 A100-40GB, NVSwitch, 8 HDR NICs "
                      "per node"),
    "selene": (selene, 4, "Selene (Megatron-LM's cluster): DGX A100 80GB nodes, 8 HDR each"),
    "dgx-h100": (dgx_h100, 1, "DGX H100: 8 H100, NVSwitch, 8 NDR NICs per node"),
    "dgx-h200": (dgx_h200, 1, "DGX H200: 8 H200, NVSwitch, 8 NDR NICs per node"),
}
ALIASES = {"p100-cluster": "p100", "p100x4": "p100", "k80-cluster": "k80", "k80x4": "k80",
           "v100": "dgx1", "dgx-1": "dgx1", "dgx-v100": "dgx1", "a100": "dgx-a100",
           "h100": "dgx-h100", "h200": "dgx-h200"}


def presets_text() -> str:
    """The presets with their sizes, for help texts: 'p100 (16 GPUs: 4 nodes x 4 P100), ...'."""
    out = []
    for name, (build, nodes, _) in PRESETS.items():
        m = build(nodes)
        kinds = "/".join(sorted(m.device_specs))
        shape = f"{nodes} nodes x {m.devices_per_node} {kinds}" if nodes > 1 else \
            f"1 node of {m.devices_per_node} {kinds}"
        out.append(f"{name} ({m.num_devices} GPUs: {shape})")
    return ", ".join(out)


def machine_model(spec: str) -> MachineModel:
    """A machine by preset name, NAME:NODES, 'local' (calibrated now) or a machine file.

        machine_model("p100")       # the paper's 4 x 4 P100 cluster
        machine_model("k80:2")      # 2 nodes of the K80 cluster
        machine_model("h100:4")     # 4 DGX H100
        machine_model("my.json")    # a machine file
    """
    text = str(spec).strip()
    name, sep, count = text.lower().partition(":")
    if name == "local" and not sep:
        from .calibrate import calibrate_local
        return calibrate_local()
    key = ALIASES.get(name, name)
    if key in PRESETS:
        build, default, _ = PRESETS[key]
        if not sep:
            return build(default)
        if not count.isdigit() or int(count) < 1:
            raise MachineModelError(f"machine '{text}': '{count}' is not a node count; write "
                                    f"{name}:N with N a whole number of at least 1, e.g. "
                                    f"{name}:2")
        return build(int(count))
    if os.path.exists(text) or text.lower().endswith((".json", ".msgpack")) or os.sep in text:
        from .fileformat import load
        return load(text)
    names = list(PRESETS) + list(ALIASES) + ["local"]
    close = difflib.get_close_matches(name, names, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else "."
    raise MachineModelError(f"machine '{text}': not a preset nor a file{hint} Presets: "
                            f"{', '.join(PRESETS)}, local (each with :NODES, e.g. p100:2); "
                            "or give the path of a machine file.")
