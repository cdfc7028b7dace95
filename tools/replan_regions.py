"""Where a search's re-planning goes, region by region (docs/design.md "Simulator speed").

    python tools/replan_regions.py nmt 16 300        # app, GPUs, proposals (seed 0)

Runs strategy.search.search as tools/search_cpu.py does (seed 0, p100 nodes of
4) with a wrapper around taskrt.regionplans.replan_region (also where replanning.py
imported it) and one around Planner.replace, and prints JSON: the search's process CPU,
best and replace() calls; the re-planned regions by path (taken from the memo, planned slab
by slab, planned whole) with their CPU, log entries, accesses and read nodes; per replace()
call the same by kind of region (from its name: weights and biases, recurrent state, the rest;
each with its gradients apart); why slab plans were refused (taskrt.slabplans.REFUSED), and
per reason the regions refused so, their CPU (the refused slab plan and the whole planning
after it together, also by kind of region) and read nodes; the regions planned slab by slab
with some slabs planned by themselves (slabplans.OWN_SLABS), their CPU and such slabs; and
for the regions the memo did not have, what a shortcut could have skipped: the share of
their log entries, accesses and nodes in the prefix unchanged since before the replace (a
walk resumed at the first changed user), the regions whose log did not change at all, and
the ones whose key had been planned before in the search (the memo had dropped them). The
wrapper makes each region's key and signatures once more (counted in the region's CPU, a
few percent): compare its numbers with each other, and time searches without it. Run from
the repository root with PYTHONPATH set to it.
"""
from __future__ import annotations

import json
import os
import re
import sys
import time
from collections import defaultdict


def kind(name: str) -> str:
    """weights / state / other, with ' grad' for a gradient (by the region's name)."""
    base = name.split("@")[0]
    if re.search(r"weight|bias", base):
        k = "weights"
    elif re.search(r"\.(hidden|cell|c_n|h_n)$", base):
        k = "state"
    else:
        k = "other"
    return k + (" grad" if "@grad" in name else "")


def main(app: str, gpus: int, proposals: int) -> dict:
    from taskrt import regionplans, replanning, slabplans
    from taskrt.regionmemo import key_signature, region_key

    def signatures(planner, name):
        return [(li, key_signature(planner.plans[li].launch.replicas,
                                   planner.plans[li].points, accesses))
                for li, _, accesses in planner.log.get(name, ())]

    def own_slabs() -> int:
        """Slabs planned by themselves so far (0 for code without slabplans.OWN_SLABS)."""
        return getattr(slabplans, "OWN_SLABS", [0])[0]

    before: dict = {}           # region -> its log's signatures before this replace
    seen: set = set()           # hashes of the keys planned so far
    rows: list = []
    calls = [0]                 # replace() calls
    replace, replan = replanning.replace, regionplans.replan_region

    def timed_replace(planner, launches, initial=None, record_undo=False):
        before.clear()
        calls[0] += 1
        for launch in launches:
            li = planner.index.get(launch.name)
            if li is not None:
                for name in planner.plans[li].regions:
                    before.setdefault(name, signatures(planner, name))
        return replace(planner, launches, initial, record_undo)

    def timed_replan(planner, name, remembered=True):
        t = time.process_time()
        log = planner.log[name]
        key = hash(region_key(planner.regions[name], planner.initial.get(name, ()), log,
                              planner.plans))
        new, old = signatures(planner, name), before.get(name, [])
        prefix = 0
        while prefix < min(len(old), len(new)) and old[prefix] == new[prefix]:
            prefix += 1
        hits, refused = planner.memo.hits, dict(slabplans.REFUSED)
        own = own_slabs()
        replan(planner, name, remembered)
        path = "memo" if planner.memo.hits > hits else \
            "slab" if isinstance(planner.planners[name], slabplans.SlabbedEnd) else "whole"
        reason = [r for r, n in slabplans.REFUSED.items() if n != refused.get(r, 0)]
        accesses = [len(a) for _, _, a in log]
        nodes = [len(planner.region_nodes.get((li, name)) or ()) for li, _, _ in log]
        rows.append(dict(name=name, path=path, cpu=time.process_time() - t,
                         entries=len(log), prefix=prefix, accesses=sum(accesses),
                         prefix_accesses=sum(accesses[:prefix]), nodes=sum(nodes),
                         prefix_nodes=sum(nodes[:prefix]), unchanged=old == new,
                         planned_before=key in seen,
                         refused=reason[0] if reason else None, own_slabs=own_slabs() - own))
        seen.add(key)

    replanning.replace = timed_replace
    replanning.replan_region = regionplans.replan_region = timed_replan
    from search_cpu import seeded_search
    result, cpu = seeded_search(app, gpus, proposals)
    out = {"app": f"{app}@{gpus}", "proposals": result.proposals, "cpu_s": round(cpu, 2),
           "best_ms": round(result.predicted * 1e3, 4), "replace_calls": calls[0],
           "load": os.getloadavg()[0]}
    by_path = defaultdict(lambda: defaultdict(float))
    by_kind = defaultdict(lambda: defaultdict(float))
    for r in rows:
        for table, key in ((by_path, r["path"]), (by_kind, (kind(r["name"]), r["path"]))):
            entry = table[key]
            entry["regions"] += 1
            for field in ("cpu", "entries", "accesses", "nodes"):
                entry[field] += r[field]
    out["regions"] = len(rows)
    out["by_path"] = {path: {"regions": int(e["regions"]), "cpu_s": round(e["cpu"], 2),
                             "per_region": {f: round(e[f] / e["regions"], 1)
                                            for f in ("entries", "accesses", "nodes")}}
                      for path, e in by_path.items()}
    n = max(1, calls[0])
    out["per_replace"] = {
        f"{k} / {path}": {"regions": round(e["regions"] / n, 2),
                          "cpu_ms": round(e["cpu"] / n * 1e3, 1),
                          "ms_each": round(e["cpu"] / e["regions"] * 1e3, 2),
                          "nodes_each": round(e["nodes"] / e["regions"]),
                 "cpu_s_by_kind": {k[5:]: round(v, 2) for k, v in e.items()
                                   if k.startswith("kind ")}}
        for (k, path), e in sorted(by_kind.items())}
    out["slab_refusals"] = dict(slabplans.REFUSED)
    by_reason = defaultdict(lambda: defaultdict(float))
    for r in rows:
        if r["refused"] is not None:
            entry = by_reason[r["refused"]]
            entry["regions"] += 1
            entry["cpu"] += r["cpu"]
            entry["nodes"] += r["nodes"]
            entry["kind " + kind(r["name"])] += r["cpu"]
    out["refused_then_planned_whole"] = {
        reason: {"regions": int(e["regions"]), "cpu_s": round(e["cpu"], 2),
                 "nodes_each": round(e["nodes"] / e["regions"]),
                 "cpu_s_by_kind": {k[5:]: round(v, 2) for k, v in e.items()
                                   if k.startswith("kind ")}}
        for reason, e in sorted(by_reason.items(), key=lambda kv: -kv[1]["cpu"])}
    mixed = [r for r in rows if r["own_slabs"]]
    out["slab_with_own_slabs"] = {"regions": len(mixed),
                                  "cpu_s": round(sum(r["cpu"] for r in mixed), 2),
                                  "own_slabs": sum(r["own_slabs"] for r in mixed)}
    missed = [r for r in rows if r["path"] != "memo"]
    total = lambda f: sum(r[f] for r in missed) or 1
    out["missed"] = {
        "regions": len(missed), "cpu_s": round(sum(r["cpu"] for r in missed), 2),
        "unchanged_prefix_share": {
            "entries": round(total("prefix") / total("entries"), 3),
            "accesses": round(total("prefix_accesses") / total("accesses"), 3),
            "nodes": round(total("prefix_nodes") / total("nodes"), 3)},
        "whole_log_unchanged": sum(r["unchanged"] for r in missed),
        "key_planned_before": sum(r["planned_before"] for r in missed),
        "key_planned_before_cpu_s": round(sum(r["cpu"] for r in missed
                                              if r["planned_before"]), 2)}
    return out


if __name__ == "__main__":
    args = sys.argv[1:] or ["nmt", "16", "300"]
    print(json.dumps(main(args[0], int(args[1]), int(args[2])), indent=1))
