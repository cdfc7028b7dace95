"""What slab plans save, region by region, in a seeded search (docs/design.md "Simulator speed").

    python tools/slab_vs_whole.py nmt 16 40        # app, GPUs, proposals (seed 0)

Runs the search of tools/search_cpu.py with a wrapper around regionplans.replan_region that
plans every re-planned region the memo does not have twice: first whole (slabplans.SLAB_PLANS
off, the memo told to keep nothing), then as the search plans it (the state it keeps; the
graph is the same either way). For the regions planned slab by slab it prints, per kind of
region (its name with digits as #, and whether some slabs were planned by themselves:
slabplans.OWN_SLABS), their count and the CPU of both plans. It also counts the regions
whose read nodes came out as before the replace (launch, kind, rect and devices of each
node), with and without nodes: a region re-planned although its plan did not change.
The search's own CPU doubles; compare the two columns with each other. Run from the
repository root with PYTHONPATH set to it.
"""
from __future__ import annotations

import os
import re
import sys
import time
from collections import defaultdict


def _nodes(planner, name: str) -> list:
    """Region `name`'s read nodes as comparable tuples, in log order."""
    out = []
    for li, _, _ in planner.log.get(name, ()):
        owner = planner.plans[li].launch.name
        for node, _, _ in planner.region_nodes.get((li, name)) or ():
            out.append((owner, node.kind, node.rect, getattr(node, "src", None),
                        getattr(node, "dst", None), getattr(node, "device", None)))
    return out


def main(app: str, gpus: int, proposals: int) -> None:
    from taskrt import regionplans, replanning, slabplans
    replan = regionplans.replan_region
    slabbed = defaultdict(lambda: [0, 0.0, 0.0, 0])     # kind -> regions, whole, slab, own
    unchanged = defaultdict(lambda: [0, 0.0])           # with nodes? -> regions, CPU

    def timed(planner, name, remembered=True):
        if not remembered:
            return replan(planner, name, remembered)
        memo, before = planner.memo, _nodes(planner, name)
        hits, kept = memo.hits, memo.max_nodes
        memo.max_nodes, slabplans.SLAB_PLANS = 0, False
        try:
            t = time.process_time()
            replan(planner, name, True)
            whole = time.process_time() - t
        finally:
            memo.max_nodes, slabplans.SLAB_PLANS = kept, True
        if memo.hits != hits:
            return replan(planner, name, True)
        refused, own = sum(slabplans.REFUSED.values()), slabplans.OWN_SLABS[0]
        t = time.process_time()
        replan(planner, name, True)
        cpu = time.process_time() - t
        after = _nodes(planner, name)
        if after == before:
            row = unchanged[bool(after)]
            row[0] += 1
            row[1] += cpu
        if sum(slabplans.REFUSED.values()) == refused:
            own = slabplans.OWN_SLABS[0] - own
            row = slabbed[re.sub(r"\d+", "#", name) + (" (own slabs)" if own else "")]
            row[0] += 1
            row[1] += whole
            row[2] += cpu
            row[3] += own

    replanning.replan_region = regionplans.replan_region = timed
    from search_cpu import seeded_search
    result, cpu = seeded_search(app, gpus, proposals)
    print(f"{app}@{gpus} {result.proposals} proposals, best {result.predicted * 1e3:.4f} ms, "
          f"cpu {cpu:.1f} s (doubled re-plans), load {os.getloadavg()[0]:.1f}")
    print(f"{'regions planned slab by slab':44s} {'n':>4s} {'whole s':>8s} {'slab s':>7s} "
          f"{'own':>5s}")
    for kind, (n, whole, slab, own) in sorted(slabbed.items(), key=lambda kv: -kv[1][1]):
        print(f"{kind:44s} {n:4d} {whole:8.2f} {slab:7.2f} {own:5d}")
    total = [sum(row[i] for row in slabbed.values()) for i in (1, 2)]
    print(f"{'all':44s} {sum(r[0] for r in slabbed.values()):4d} {total[0]:8.2f} "
          f"{total[1]:7.2f}")
    for has_nodes, (n, cpu) in sorted(unchanged.items()):
        print(f"re-planned to the same read nodes ({'some' if has_nodes else 'no'} nodes): "
              f"{n} regions, {cpu:.2f} s")


if __name__ == "__main__":
    args = sys.argv[1:] or ["nmt", "16", "40"]
    main(args[0], int(args[1]), int(args[2]))
