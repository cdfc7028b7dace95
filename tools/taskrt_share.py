"""taskrt's share of a search, in process CPU (docs/design.md "Simulator speed").

    python tools/taskrt_share.py inception 16 300     # app, GPUs, proposals (seed 0)

Runs strategy.search.search as tools/search_cpu.py does (seed 0, p100 nodes of 4)
with timers around the planner's entry points a search calls (Planner.add_launches: the
session builds; Planner.replace, refresh, undo) and, inside planning a region's reads
(RegionPlanner.plan_reads, builds and re-plans together), around its reductions
(_reduce_for_reads) and its copies in (_copy_in, per read). The reads that make copies are
classed by the valid pieces they overlap, as found just before the read: every piece held by
one device alone (a first read of what a launch wrote: what copies computed from the two
partitions alone would give) or some held by several (after earlier readers: the source is
chosen among holders by the sends so far), and the read rect containing every piece or
cutting some. Prints JSON: the search's CPU, best and counts; CPU per entry point and per
proposal; the reads' phases; per class the reads, copies and CPU. A timer costs ~0.5 us a
call (~0.1 s in a 300-proposal Inception search); the classing query is outside the timed
calls, but it counts toward a valid-piece index's building its grid (rectindex.py
_grid_pays), so a read's cost can shift a little from a run without the tool (the plans do
not: the same best and simulated counts). Compare the numbers with each other, and time
searches without the tool. The copies in are timed and classed per read of the Python walk
(coherence.COMPILED_READS off, the compiled planner's oracle, which plans alike): the
compiled planner walks a launch's reads in one call, with no per-read entry to time. Run
from the repository root with PYTHONPATH set to it.
"""
from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict


def main(app: str, gpus: int, proposals: int) -> dict:
    from taskrt import coherence
    from taskrt.coherence import RegionPlanner
    from taskrt.planner import Planner

    coherence.COMPILED_READS = False        # (per-read timers: the Python walk; see above)

    cpu = defaultdict(float)        # label -> process CPU s
    calls = defaultdict(int)
    clock = time.process_time

    def timed(cls, name: str, label: str) -> None:
        inner = getattr(cls, name)

        def wrapper(*args, **kwargs):
            t = clock()
            try:
                return inner(*args, **kwargs)
            finally:
                cpu[label] += clock() - t
                calls[label] += 1
        setattr(cls, name, wrapper)

    for name in ("add_launches", "replace", "refresh", "undo"):
        timed(Planner, name, f"Planner.{name}")
    timed(RegionPlanner, "plan_reads", "plan_reads")
    timed(RegionPlanner, "_reduce_for_reads", "reductions")
    classes = defaultdict(lambda: defaultdict(float))
    copy_in = RegionPlanner._copy_in
    made = [0]                      # copies plan_reads returned

    def classed_copy_in(self, launch, color, device, rect, out):
        state = self.state
        # (Classed before the read: it adds the reader to the holders it copies from.)
        pieces = () if (device, rect) in state.held else state.valid.overlapping(rect)
        shared = "some held by several" if any(len(h) > 1 for _, _, h in pieces) \
            else "each held by one"
        cut = "read contains them" if all(rect.contains(r) for _, r, _ in pieces) \
            else "read cuts some"
        n = len(out)
        t = clock()
        copy_in(self, launch, color, device, rect, out)
        spent = clock() - t
        cpu["copies in"] += spent
        calls["copies in"] += 1
        copies = len(out) - n
        if copies:
            entry = classes[f"{shared}, {cut}"]
            entry["reads"] += 1
            entry["copies"] += copies
            entry["cpu_s"] += spent
    RegionPlanner._copy_in = classed_copy_in
    plan_reads = RegionPlanner.plan_reads

    def counted_plan_reads(self, launch, reads):
        out = plan_reads(self, launch, reads)
        made[0] += sum(1 for node, _, _ in out
                       if getattr(node, "reduction", True) is False)
        return out
    RegionPlanner.plan_reads = counted_plan_reads

    from search_cpu import seeded_search
    result, total = seeded_search(app, gpus, proposals)
    per = max(1, result.proposals)
    return {
        "app": f"{app}@{gpus}", "proposals": result.proposals, "search_cpu_s": round(total, 2),
        "best_ms": round(result.predicted * 1e3, 4), "simulated": result.simulated,
        "load": os.getloadavg()[0],
        "cpu_s": {label: round(s, 3) for label, s in sorted(cpu.items())},
        "calls": dict(sorted(calls.items())),
        "ms_per_proposal": {label: round(s / per * 1e3, 2) for label, s in sorted(cpu.items())},
        "copies_made": made[0],
        "copies_by_class": {k: {f: round(v, 3) if f == "cpu_s" else int(v)
                                for f, v in e.items()} for k, e in sorted(classes.items())},
    }


if __name__ == "__main__":
    args = sys.argv[1:] or ["inception", "16", "300"]
    print(json.dumps(main(args[0], int(args[1]), int(args[2])), indent=1))
