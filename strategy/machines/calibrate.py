"""The "local" machine: this job's ranks as a MachineModel with measured numbers.

Every rank measures its device (best-of matmul FLOP/s per dtype, a memory copy, the time of
a tiny op); ranks of one host are one node. Then MPI ping-pongs time one pair of ranks on a
node and one pair on two nodes (latency at 8 bytes, bandwidth from 64 KiB to 4 MiB), and an
all-reduce of the whole job at a few sizes fits the model's `allreduce_efficiency`. Every
rank returns the same model (medians are gathered, timings broadcast), so graphs built from
it agree. Ranks that are not measuring wait with a sleeping poll, never a spinning receive.
About a second in all; without MPI only the device is measured and the model has one device.
"""
from __future__ import annotations

import dataclasses
import os
import statistics
import time

import numpy as np

from taskrt.discovery import idle_barrier

from .errors import MachineModelError
from .presets import cluster_model
from .specs import DEVICE_SPECS, DeviceSpec

PING_SIZES = ((8, 30), (1 << 16, 20), (1 << 20, 8), (1 << 22, 5))   # (bytes, round trips)
ALLREDUCE_SIZES = ((1 << 12, 8), (1 << 20, 5), (1 << 22, 4))       # (bytes, repeats)


def _best_seconds(fn, budget: float, sync=lambda: None, min_runs: int = 3) -> float:
    """The fastest of repeated runs of fn (noise only slows runs down) within ~budget s."""
    fn()
    sync()
    best, start, runs = float("inf"), time.perf_counter(), 0
    while runs < min_runs or time.perf_counter() - start < budget:
        t = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t)
        runs += 1
    return best


def _gpu_kind(name: str) -> str:
    for kind in DEVICE_SPECS:
        if kind in name.upper():
            return kind
    return "".join(c for c in name if c.isalnum() or c in "_.-") or "cuda"


def measure_device(device: str = "cpu", ranks_sharing: int = 1, budget: float = 0.12) -> dict:
    """Measured speeds of a torch device, as DeviceSpec fields plus "kind"."""
    import torch
    gpu = device.startswith("cuda")
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    out = {}
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False      # float32 means float32 here
    try:
        for field, dtype, n in (("fp32_flops", torch.float32, 4096 if gpu else 384),
                                ("fp16_flops", torch.bfloat16, 8192 if gpu else 256),
                                ("fp64_flops", torch.float64, 4096 if gpu else 256)):
            a = torch.randn(n, n, device=device).to(dtype)
            b = torch.randn(n, n, device=device).to(dtype)
            out[field] = 2 * n ** 3 / _best_seconds(lambda: torch.mm(a, b), budget, sync)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    src = torch.ones((256 if gpu else 16) << 18, device=device)    # 256 MiB or 16 MiB
    dst = torch.empty_like(src)
    out["memory_bandwidth"] = 2 * src.nbytes / _best_seconds(lambda: dst.copy_(src), budget, sync)
    x, y = torch.zeros(1, device=device), torch.zeros(1, device=device)
    calls = 200

    def tiny():
        for _ in range(calls):
            torch.add(x, x, out=y)
    out["launch_overhead"] = _best_seconds(tiny, budget / 2, sync) / calls
    if gpu:
        props = torch.cuda.get_device_properties(torch.device(device))
        out["memory_capacity"] = int(props.total_memory)
        out["kind"] = _gpu_kind(props.name)
    else:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        out["memory_capacity"] = int(total // max(1, ranks_sharing))
        out["kind"] = "cpu"
    return out


def _pingpong(comm, a: int, b: int) -> list | None:
    """[[bytes, one-way seconds], ...] measured by ranks a and b (None elsewhere): the
    fastest round trip of each size, halved."""
    rank = comm.Get_rank()
    if rank not in (a, b):
        return None
    other = b if rank == a else a
    buf = np.zeros(max(s for s, _ in PING_SIZES), dtype=np.uint8)
    out = []
    for size, trips in PING_SIZES:
        msg, times = buf[:size], []
        for i in range(trips + 2):                     # two warm-up round trips
            t = time.perf_counter()
            if rank == a:
                comm.Send(msg, dest=other, tag=7)
                comm.Recv(msg, source=other, tag=7)
            else:
                comm.Recv(msg, source=other, tag=7)
                comm.Send(msg, dest=other, tag=7)
            if i >= 2:
                times.append((time.perf_counter() - t) / 2)
        out.append([size, min(times)])       # noise (preemption) only slows trips down
    return out


def _measured_pair(comm, a: int, b: int) -> list:
    # Waiting ranks poll every millisecond from the start: on oversubscribed cores, frequent
    # wake-ups preempt the measuring ranks and inflate their small-message latency 100x.
    result = _pingpong(comm, a, b)
    idle_barrier(comm, 2e-5 if result is not None else 1e-3)
    return comm.bcast(result, root=a)


def _latency_bandwidth(points: list) -> tuple[float, float]:
    """Latency: the smallest message's time; bandwidth: least-squares slope of the rest."""
    latency = points[0][1]
    big = points[1:]
    mean_s = sum(s for s, _ in big) / len(big)
    mean_t = sum(t for _, t in big) / len(big)
    slope = sum((s - mean_s) * (t - mean_t) for s, t in big) / \
        sum((s - mean_s) ** 2 for s, _ in big)
    size, seconds = big[-1]
    return latency, 1 / slope if slope > 0 else size / seconds


def _allreduce_times(comm) -> list:
    out = []
    for size, reps in ALLREDUCE_SIZES:
        send = np.ones(size // 4, dtype=np.float32)
        recv = np.empty_like(send)
        times = []
        for i in range(reps + 1):
            idle_barrier(comm)
            t = time.perf_counter()
            comm.Allreduce(send, recv)
            if i:
                times.append(time.perf_counter() - t)
        out.append([size, statistics.median(times)])
    return comm.bcast(out, root=0)


def _fit_efficiency(model, measured: list) -> float:
    """Bandwidth factor that makes the model's all-reduce match the largest measured size."""
    size, seconds = measured[-1]
    devices = range(model.num_devices)
    name, total = model.allreduce_algorithm(size, devices)
    fixed = model.allreduce_times(0, devices)[name]
    return min(20.0, max(0.05, (total - fixed) / max(seconds - fixed, 1e-9)))


def calibrate_local(comm=None):
    """The MachineModel of this job's ranks (every rank must call it), or of this one
    process when not under mpirun.

        m = calibrate_local()            # under mpirun -np 2: 1x2 cpu (shm ...)
        m.save("local.json")
    """
    import torch

    from taskrt.discovery import launched_by_mpi
    start = time.perf_counter()
    if comm is None and launched_by_mpi():
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    size = comm.Get_size() if comm is not None else 1
    host = os.uname().nodename
    hosts = comm.allgather(host) if comm is not None else [host]
    order = list(dict.fromkeys(hosts))
    node_of = [order.index(h) for h in hosts]
    if node_of != sorted(node_of):
        raise MachineModelError(f"calibrate_local: ranks are not grouped by node (nodes of "
                                f"ranks 0..{size - 1}: {node_of}); start them node by node "
                                "(mpirun's default fill, or --map-by slot)")
    per_node = [node_of.count(n) for n in range(len(order))]
    rank = comm.Get_rank() if comm is not None else 0
    local_rank = rank - node_of.index(node_of[rank])
    device = f"cuda:{local_rank % torch.cuda.device_count()}" \
        if torch.cuda.is_available() else "cpu"
    mine = measure_device(device, per_node[node_of[rank]])
    everyone = comm.allgather(mine) if comm is not None else [mine]
    kinds = sorted({m["kind"] for m in everyone})
    if len(kinds) > 1:
        raise MachineModelError(f"calibrate_local: ranks have devices of kinds {kinds}; "
                                "calibrate ranks of one kind")
    fields = [f.name for f in dataclasses.fields(DeviceSpec) if f.name != "kind"]
    values = {f: statistics.median(m[f] for m in everyone) for f in fields}
    values["memory_capacity"] = int(values["memory_capacity"])
    spec = DeviceSpec(kinds[0], **values)
    record = {"ranks_per_node": per_node, "torch_threads": torch.get_num_threads(),
              "device": device.split(":")[0]}
    intra = inter = ("shm", 0.0, 1.0)
    if comm is not None and size > 1:
        idle_barrier(comm)
        first = [node_of.index(n) for n in range(len(order))]
        multi = [n for n, c in enumerate(per_node) if c > 1]
        if multi:
            pts = _measured_pair(comm, first[multi[0]], first[multi[0]] + 1)
            intra = ("shm", *_latency_bandwidth(pts))
            record["pingpong_intra"] = pts
        if len(order) > 1:
            pts = _measured_pair(comm, first[0], first[1])
            inter = ("nic", *_latency_bandwidth(pts))
            record["pingpong_inter"] = pts
        record["allreduce"] = _allreduce_times(comm)

    parts = []
    if "pingpong_intra" in record:
        parts.append(f"shm {intra[2] / 1e9:.3g} GB/s, {intra[1] * 1e6:.3g} us")
    if "pingpong_inter" in record:
        parts.append(f"network {inter[2] / 1e9:.3g} GB/s, {inter[1] * 1e6:.3g} us")

    def build(efficiency: float, calibration: dict):
        return cluster_model("local", spec, per_node, intra, inter,
                             allreduce_efficiency=efficiency,
                             summary=", ".join(parts) or "one device", calibration=calibration)
    efficiency = 1.0
    if "allreduce" in record:
        fitted = build(_fit_efficiency(build(1.0, {}), record["allreduce"]), {})
        efficiency = fitted.allreduce_efficiency
        for point in record["allreduce"]:     # [bytes, measured seconds, model seconds]
            point.append(fitted.allreduce_time(point[0], range(fitted.num_devices)))
    seconds = time.perf_counter() - start
    record["seconds"] = comm.bcast(seconds, root=0) if comm is not None else seconds
    return build(efficiency, record)
