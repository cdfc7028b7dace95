"""Planner scaling: microseconds of planning per point task for graphs of 1k, 10k, 100k tasks.

The program is a chain of launches on 64 devices (8 ranks x 8), like the layers of a deep
network: launch i writes activation a{i} (256 x 256) part by part, reading its part of a{i-1}
plus a halo of one row, and every fourth launch also reads the same part of a{i-3} (a skip
connection). Partitions change now and then and the device of part 0 moves every third
launch, so repartitioning and halo copies occur. Every fifth launch splits the reduction (an
8x8 grid of points adds into bands of rows: reduction copies and reduces when the next launch
reads); every sixth also adds into a fresh gradient region from all 64 devices, read by the
next launch everywhere (an all-reduce); every seventh reads a weight that lives on device 0.
Linear planning means a flat per-task cost: the 100k/1k ratio near 1.

A second, "stress" program cycles over only four activation regions, so every region is
rewritten thousands of times with ever-changing partitions and halos: the per-instance access
records fragment (each write splits the older records it partly covers) until the pieces
reach the granularity of all the cuts used, which costs a bounded amount per task once
reached; it is measured at 1k and 10k tasks to show that warm-up.
"""
from __future__ import annotations

import statistics
import time

from taskrt import R, RED, WD, IndexLaunch, Machine, Planner, Rect, Region, \
    RegionRequirement, block_rect

# Output partitions, launch after launch: runs of equal partitions (only halo copies between
# them) and changes (repartitioning copies).
DEGREES = [(8, 8), (8, 8), (16, 4), (16, 4), (64, 1), (64, 1), (32, 2), (4, 16)]
SHAPE = (256, 256)
NDEV = 64


def _halo_rows(rect: Rect) -> Rect:
    """The rect grown by one row on each side, clipped to the region."""
    return Rect((max(rect.lo[0] - 1, 0), rect.lo[1]), (min(rect.hi[0] + 1, SHAPE[0]), rect.hi[1]))


def program(n_tasks: int, stress: bool = False):
    """Launches totalling about n_tasks point tasks, and the initial data they need."""
    first = Region("a-1", SHAPE)
    acts = {-1: first}
    weight = Region("w", (64, 256))
    launches = []
    tasks = 0
    i = 0
    grad = None
    while tasks < n_tasks:
        src = acts[i - 1]
        if stress and i >= 3:
            dst = acts[i] = acts[i - 4]              # four regions in a cycle
        else:
            dst = acts[i] = Region(f"a{i}", SHAPE)
        d_out = DEGREES[i % len(DEGREES)]
        shift = (i // 3) % NDEV
        extra = []                                   # (region, rect of part c, privilege)
        if grad is not None:
            extra.append((grad, None, R))            # read the summed gradient everywhere
            grad = None
        if i % 6 == 5:
            grad = Region(f"g{i}", (64, 64))
            extra.append((grad, None, RED))          # every device adds to all of it
        if i % 7 == 6:
            extra.append((weight, None, R))
        if i % 4 == 3 and not stress:
            extra.append((acts[i - 3], "part", R))    # skip connection: this part of it
        if i % 5 == 4:
            # Split reduction: each point reads its part and adds into a band of rows.
            def proj(c, src=src, dst=dst, d=d_out, extra=tuple(extra)):
                bands = min(8, d[0])
                band = block_rect(SHAPE, (bands, 1), (c[0] * bands // d[0], 0))
                return [RegionRequirement(src, block_rect(SHAPE, d, c), R),
                        RegionRequirement(dst, band, RED)] + _extra(extra, d, c)
        else:
            def proj(c, src=src, dst=dst, d=d_out, extra=tuple(extra)):
                rect = block_rect(SHAPE, d, c)
                return [RegionRequirement(src, _halo_rows(rect), R),
                        RegionRequirement(dst, rect, WD)] + _extra(extra, d, c)
        n = d_out[0] * d_out[1]
        launches.append(IndexLaunch(f"l{i}", None, d_out, proj,
                                    devices=[(shift + j) % NDEV for j in range(n)]))
        tasks += n
        i += 1
    initial = {first: [(first.rect, 0)], weight: [(weight.rect, 0)]}
    return launches, initial, tasks


def _extra(extra, d, c) -> list:
    out = []
    for region, kind, priv in extra:
        rect = region.rect if kind is None else block_rect(SHAPE, d, c)
        out.append(RegionRequirement(region, rect, priv))
    return out


def plan_once(n_tasks: int, stress: bool = False) -> dict:
    launches, initial, tasks = program(n_tasks, stress)
    machine = Machine.grid(NDEV // 8, 8)
    t0 = time.perf_counter()
    p = Planner(machine, initial=initial)
    for lnch in launches:
        p.add_launch(lnch)
    g = p.finish()
    dt = time.perf_counter() - t0
    c = g.count()
    return {"tasks": tasks, "nodes": len(g), "copies": c["copy"], "reduces": c["reduce"],
            "allreduces": c["allreduce"], "edges": g.num_edges, "seconds": dt,
            "us_per_task": dt / tasks * 1e6, "us_per_node": dt / len(g) * 1e6}


def _measure(sizes, stress: bool, repeats: dict, label: str):
    results, rows = {}, []
    for n in sizes:
        runs = [plan_once(n, stress) for _ in range(repeats.get(n, 1))]
        res = dict(runs[0])
        for key in ("us_per_task", "us_per_node", "seconds"):
            res[key] = statistics.median(r[key] for r in runs)
        results[str(n)] = res
        rows.append((f"{label}: plan {res['tasks']} tasks ({res['nodes']} nodes: {res['copies']} "
                     f"copies, {res['reduces']} reduces, {res['allreduces']} all-reduces)",
                     f"{res['us_per_task']:.0f} us/task, {res['us_per_node']:.1f} us/node",
                     f"{res['seconds']:.2f} s (median of {len(runs)})"))
    small, large = results[str(sizes[0])], results[str(sizes[-1])]
    ratio = large["us_per_task"] / small["us_per_task"]
    ratio_node = large["us_per_node"] / small["us_per_node"]
    results["ratio_per_task"] = ratio
    results["ratio_per_node"] = ratio_node
    rows.append((f"{label}: per-task cost, {_size(sizes[-1])} / {_size(sizes[0])} tasks",
                 f"{ratio:.2f}x (per node {ratio_node:.2f}x)", "1.0 = linear planning"))
    return results, rows


def run(quick: bool = False) -> dict:
    repeats = {1_000: 5, 10_000: 2, 100_000: 1}
    chain, rows = _measure([1_000, 10_000, 100_000] if not quick else [128, 512], False,
                           repeats, "layer chain")
    stress, rows2 = _measure([1_000, 10_000] if not quick else [128, 256], True, repeats,
                             "4 regions reused (stress)")
    results = dict(chain)
    results["stress"] = stress
    return {"title": "planner scaling", "results": results, "rows": rows + rows2}


def _size(n: int) -> str:
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)
