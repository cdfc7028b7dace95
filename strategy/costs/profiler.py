"""Measuring task costs on the local device: `profile_graph` and `profile_nodes`.

Every distinct cost key of a graph's task nodes runs once in isolation (parts.node_steps:
the executor's own step over fresh part tensors), `warmup` untimed runs then `repeats`
timed ones, and the median is kept. Timing uses CUDA events on a GPU (after synchronizing,
so the host's launch time of the task counts, as it does in a real iteration) and
time.perf_counter on the CPU. A backward node's paired forward runs before each of its runs,
untimed. Optimizer updates run at step 2 (Adam's bias correction divides by zero at step 0;
SGD's momentum takes its steady-state path), and the optimizer's count is restored after.

A node that fails (a custom operator rejecting random data, say) does not stop the run: its
key stays unmeasured (the cost model falls back to the analytic estimate), and the error is
kept in `Profile.failures` and reported once.
"""
from __future__ import annotations

import statistics
from contextlib import nullcontext
import time
import warnings
import torch

from taskrt.taskgraph import TASK

from .parts import SteadyStep, node_steps
from .profile import Measurement, Profile, device_kind
from .work import node_work


class ProfileWarning(UserWarning):
    """Some task nodes could not be measured."""


def distinct_nodes(graphs) -> dict:
    """cost key -> (first task node with it, its graph), over one or several graphs."""
    out: dict = {}
    for g in graphs:
        for n in g.nodes:
            if n.kind is TASK:
                k = n.cost_key
                if k not in out:
                    out[k] = (n, g)
    return out


def _timer(device: str):
    if device.startswith("cuda"):
        dev = torch.device(device)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)

        def cuda_time(fn) -> float:
            torch.cuda.synchronize(dev)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        return cuda_time

    def cpu_time(fn) -> float:
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t
    return cpu_time


def measure_node(node, device: str = "cpu", repeats: int = 5, warmup: int = 2, graph=None,
                 int_ranges=None) -> Measurement:
    """Median time of `node` run in isolation on torch `device` (see the module doc)."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"measure_node: repeats {repeats} must be >= 1 and warmup {warmup} "
                         ">= 0.")
    timer = _timer(device)
    fwd, step = node_steps(node, device, graph, int_ranges)
    if node.launch.state_from is not None and fwd is None:
        raise ValueError(f"{node.describe()}: its forward ({node.launch.state_from}) is not "
                         "in the graph; profile the whole graph.")
    times = []
    on_gpu = device.startswith("cuda")
    with SteadyStep(node), (torch.cuda.device(torch.device(device)) if on_gpu else nullcontext()):
        for i in range(warmup + repeats):
            if fwd is not None:
                fwd()
            t = timer(step)
            if i >= warmup:
                times.append(t)
    return Measurement(statistics.median(times), repeats, min(times), max(times))


def profile_nodes(nodes: dict, device: str = "cpu", repeats: int = 5, warmup: int = 2,
                  int_ranges=None, skip: Profile | None = None, progress=None) -> Profile:
    """Measure each (node, graph) of `nodes` (cost key -> (node, graph)) on `device`; keys
    already measured in `skip` for this device kind are left out."""
    kind = device_kind(device)
    prof = Profile(meta={"runs": [run_info(device, repeats, warmup)]})
    todo = [(k, n, g) for k, (n, g) in nodes.items()
            if skip is None or skip.get(k, kind) is None]
    for i, (key, node, graph) in enumerate(todo):
        try:
            work = node_work(node, graph, int_ranges)
            prof.work[key] = work
            m = measure_node(node, device, repeats, warmup, graph, int_ranges)
        except Exception as e:   # a failing node must not stop the profile (module doc)
            prof.failures[key] = f"{node.describe()}: {type(e).__name__}: {e}"
            continue
        prof.add(key, kind, m)
        if progress is not None:
            progress(i + 1, len(todo), node, m)
    if prof.failures:
        first = next(iter(prof.failures.values()))
        warnings.warn(f"profile on {kind}: {len(prof.failures)} of {len(todo)} cost keys could "
                      f"not be measured and will use the analytic model; first: {first}",
                      ProfileWarning, stacklevel=2)
    return prof


def profile_graph(graph, device: str = "cpu", repeats: int = 5, warmup: int = 2,
                  int_ranges=None, skip: Profile | None = None) -> Profile:
    """Measure every distinct cost key of `graph`'s task nodes on the local `device`.

        prof = profile_graph(trainer.graph, "cpu", repeats=5, warmup=2)
        prof.save("alexnet.profile")
    """
    return profile_nodes(distinct_nodes([graph]), device, repeats, warmup, int_ranges, skip)


def run_info(device: str, repeats: int, warmup: int) -> dict:
    """What a profile records about how and where it was measured."""
    import platform
    info = {"device": device, "kind": device_kind(device), "repeats": repeats,
            "warmup": warmup, "torch": torch.__version__, "threads": torch.get_num_threads(),
            "host": platform.node(), "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
    if device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return info
