"""Where Planner.replace's process CPU goes in a search, timed on the path the search runs
(docs/design.md "Simulator speed").

    python tools/replace_share.py inception 16 300     # app, GPUs, proposals (seed 0)

Runs strategy.search.search as tools/search_cpu.py does (seed 0, p100 nodes of 4) with
process-CPU timers around Planner.replace and, only while a replace() runs, around the steps
it calls: re-planning a region (regionplans.replan_region), its region key, slab plan
(refused or made), new RegionPlanner and remembered plan; a launch's reads (_plan_reads:
its reductions, RegionPlanner._reduce_for_reads with _reduce_to and _mark_summed, and its
copies in, validpieces.copy_in_all with RegionPlanner._copy per copy) and its points'
accesses (_plan_accesses, RegionPlanner.access_points). Unlike tools/taskrt_share.py it
times the compiled reads (coherence.COMPILED_READS as it is), and unlike cProfile it costs
a call only where a timer is (~1 us each; cProfile adds that to every Python call, which
weighs call-heavy steps such as the reductions up: 48% of replace in a profile, ~1/3 here).
Prints JSON: the search's CPU, best and counts, and per timed step its calls, CPU and share
of replace. Nested steps are inside their callers' CPU. Compare the numbers with each other,
and time searches without the tool. Run from the repository root with PYTHONPATH set to it.
"""
from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter


def main(app: str, gpus: int, proposals: int) -> dict:
    from taskrt import coherence, regionplans, replanning, validpieces
    from taskrt.coherence import RegionPlanner
    from taskrt.planner import Planner

    cpu: Counter = Counter()
    calls: Counter = Counter()
    clock = time.process_time
    inside = [False]            # whether a replace() is running

    def timed(owner, name: str, label: str) -> None:
        inner = getattr(owner, name)
        top = label == "replace"

        def wrapper(*args, **kwargs):
            if not (top or inside[0]):
                return inner(*args, **kwargs)
            inside[0] = True
            start = clock()
            try:
                result = inner(*args, **kwargs)
            finally:            # (a replace that raises still counts, and ends the window)
                inside[0] = inside[0] and not top
                calls[label] += 1
                cpu[label] += clock() - start
            return result
        setattr(owner, name, wrapper)

    timed(Planner, "replace", "replace")
    timed(replanning, "replan_region", "replan_region")     # (as replace calls it)
    for name in ("region_key", "slab_plan", "region_plan"):
        timed(regionplans, name, name)
    timed(RegionPlanner, "__init__", "RegionPlanner()")
    timed(Planner, "_plan_reads", "_plan_reads")
    timed(RegionPlanner, "_reduce_for_reads", "_reduce_for_reads")
    timed(RegionPlanner, "_reduce_to", "_reduce_to")
    timed(RegionPlanner, "_mark_summed", "_mark_summed")
    timed(coherence, "copy_in_all", "copy_in_all")
    timed(validpieces.ValidPieces, "copy_reads", "ValidPieces.copy_reads")
    timed(RegionPlanner, "_copy", "_copy")
    timed(Planner, "_plan_accesses", "_plan_accesses")
    timed(RegionPlanner, "access_points", "access_points")

    from search_cpu import seeded_search
    result, total = seeded_search(app, gpus, proposals)
    whole = cpu["replace"] or 1.0
    return {
        "app": f"{app}@{gpus}", "proposals": result.proposals, "search_cpu_s": round(total, 2),
        "best_ms": round(result.predicted * 1e3, 4), "simulated": result.simulated,
        "load": os.getloadavg()[0],
        "replace_ms_per_call": round(whole / max(1, calls["replace"]) * 1e3, 2),
        "steps": {label: {"calls": calls[label], "cpu_s": round(s, 3),
                          "share_of_replace": round(s / whole, 3)}
                  for label, s in sorted(cpu.items(), key=lambda kv: -kv[1])},
    }


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    args = sys.argv[1:] or ["inception", "16", "300"]
    print(json.dumps(main(args[0], int(args[1]), int(args[2])), indent=1))
