"""Executor overhead: a replayed graph of trivial tasks against the same torch call in a loop.

The graph: launches of 4 points (one per logical CPU device), each point adding 1 in place to
its own 1-element part of a region, so every task is one tiny torch op and the graph has no
copies. The baseline calls the same op on the same views in a plain Python loop. Both are
timed side by side in one run (median of several replays); the difference is what the
executor adds per task (target: under 20 us).
"""
from __future__ import annotations

import statistics
import time

import torch

from taskrt import RW, IndexLaunch, LocalExecutor, Machine, Rect, Region, RegionRequirement, plan

DEVICES = 4


def add_one(ctx, x):
    x.add_(1)                       # in place: nothing to return for the RW requirement


def build(n_tasks: int):
    region = Region("x", (DEVICES,))
    reqs = [(RegionRequirement(region, Rect((i,), (i + 1,)), RW),) for i in range(DEVICES)]
    launches = [IndexLaunch(f"add{k}", add_one, (DEVICES,), lambda c: reqs[c[0]],
                            devices=list(range(DEVICES)))
                for k in range(n_tasks // DEVICES)]
    initial = {region: [(Rect((i,), (i + 1,)), i) for i in range(DEVICES)]}
    return plan(launches, Machine.local(DEVICES), initial=initial)


def _time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run(quick: bool = False) -> dict:
    n = 2_000 if quick else 20_000
    repeats = 3 if quick else 7
    threads = torch.get_num_threads()
    torch.set_num_threads(1)            # a 1-element op: threads only add noise
    try:
        return _run(n, repeats)
    finally:
        torch.set_num_threads(threads)


def _run(n: int, repeats: int) -> dict:
    graph = build(n)
    assert len(graph) == n and graph.count()["task"] == n
    ex = LocalExecutor(graph)
    ex_trace = LocalExecutor(graph, record_trace=True)
    ex.write("x", torch.zeros(DEVICES))
    ex_trace.write("x", torch.zeros(DEVICES))
    # The baseline works on the very views the executor's tasks get.
    views = [ex.store.instance("x", node.device, node.requirements[0].rect)
             for node in graph.nodes]

    def direct():
        for v in views:
            v.add_(1)

    def direct_call():
        for v in views:
            add_one(None, v)

    for f in (direct, ex.run):                       # warm up
        f()
    t_direct, t_call, t_exec, t_trace = [], [], [], []
    for _ in range(repeats):                         # interleaved, so load hits all alike
        t_direct.append(_time(direct, 1))
        t_call.append(_time(direct_call, 1))
        t_exec.append(_time(ex.run, 1))
        t_trace.append(_time(ex_trace.run, 1))
    us = {k: statistics.median(v) / n * 1e6 for k, v in
          (("direct", t_direct), ("direct_call", t_call), ("executor", t_exec),
           ("executor_trace", t_trace))}
    overhead = us["executor"] - us["direct"]
    results = {"tasks": n, "us_per_task": us, "overhead_us": overhead,
               "overhead_trace_us": us["executor_trace"] - us["direct"],
               "ratio_executor_vs_direct": us["executor"] / us["direct"]}
    rows = [
        (f"replayed graph of {n} 1-element adds", f"{us['executor']:.2f} us/task",
         f"{us['executor_trace']:.2f} us/task with trace recording"),
        ("same torch op in a Python loop", f"{us['direct']:.2f} us/call",
         f"{us['direct_call']:.2f} us through the task function"),
        ("executor overhead per task", f"{overhead:.2f} us "
         f"({us['executor'] / us['direct']:.2f}x the bare op)", "target < 20 us"),
    ]
    return {"title": "executor overhead", "results": results, "rows": rows}
