"""How a region's plan comes to be in a Planner, besides planning it launch by launch
(planner.py add_launch): planned again alone over its log (replace(), or before a launch is
added to a region whose RegionPlanner may be shared), taken back from the memo of region
plans (regionmemo.py) or moved there from another region alike (regionclasses.stamp), or
installed launch by launch from its class's plan (regionclasses.py). Each leaves exactly what
planning the region would have: its RegionPlanner, read node lists, and the predecessors and
Red+ targets of the tasks' requirements on it.
"""
from __future__ import annotations

from .coherence import RegionPlanner
from .errors import PlanError
from .regionclasses import stamp
from .regionmemo import RegionPlan, region_key
from .slabplans import slab_plan


def own_planner(planner, name: str) -> None:
    """Before region `name` is planned further: if its RegionPlanner may be shared (with
    regions planned alike, or with a remembered plan), plan it again alone over its log,
    into its own."""
    rp = planner.planners.get(name)
    if rp is None or rp not in planner._frozen:
        return
    if not planner.replannable:
        raise PlanError(f"Region '{name}' is used by a launch added after add_launches() "
                        "planned it with others alike, and this planner kept no log to "
                        "re-plan it from. Give a one-shot planner all its launches at once.")
    replan_region(planner, name, remembered=False)


def install(planner, name: str, li: int, accesses, items, per_access, rp,
            moves=None) -> None:
    """Put launch `li`'s part of region `name`'s plan made by its class in place: what
    _plan_reads and _plan_accesses would have left (`moves`: RegionClasses.next_entry's;
    only for a launch record kept by columns, a planner that is never re-planned)."""
    planner.planners[name] = rp
    planner._frozen.add(rp)
    planner._dirty.add(name)
    planner._mark((li, None))
    if items is not None:
        planner._mark((li, name))
        planner.region_nodes[li, name] = items
    lp = planner.plans[li]
    if lp.columns is not None:
        lp.columns.append((accesses, per_access, moves))
    else:
        assert moves is None, "a class's preds left unmoved for a re-plannable planner"
        put_accesses(lp, name, accesses, per_access)


def put_accesses(lp, name: str, accesses, per_access) -> None:
    """Launch plan `lp`'s tasks get, per access of region `name`, the predecessors and Red+
    targets a plan of it gave (`per_access`: [(preds, targets)] aligned with `accesses`)."""
    preds, targets = lp.task_preds, lp.task_targets
    for (pi, k, _), (p, t) in zip(accesses, per_access):
        preds[pi][name] = p
        targets[pi][k] = t


def replan_region(planner, name: str, remembered: bool = True) -> None:
    """Plan region `name` again over its log, or (`remembered`) take back the plan a log
    with the same key got before (regionmemo.py), moved to this region if it was made
    for another, or plan it slab by slab (slabplans.py). Without `remembered` the region
    gets a RegionPlanner of its own that can be planned further."""
    log = planner.log[name]
    key = region_key(planner.regions[name], planner.initial.get(name, ()), log, planner.plans)
    known = planner.memo.get(key, name) if remembered else None
    if known is not None:
        lis = tuple(li for li, _, _ in log)
        if known.name != name or known.lis != lis:
            # Made for another region alike (or other launches): moved to this one.
            planner.memo.moved += 1
            known = stamp(known, planner.regions[name], lis,
                          [planner.plans[li].launch.name for li in lis])
            if planner.memo.put(key, known):
                planner._read_groups.clear()
        adopt(planner, name, known)
        return
    # (Not for own_planner, which re-plans a region to plan further into it.)
    sliced = slab_plan(planner, name, log) if remembered else None
    if sliced is not None:
        # Its planner holds no buffers' accesses (slabplans.py): never planned further.
        planner._frozen.add(sliced.planner)
        adopt(planner, name, sliced)
        if planner.memo.max_nodes and planner.memo.put(key, sliced):
            planner._read_groups.clear()
        return
    region = planner.regions[name]
    rp = planner.planners[name] = RegionPlanner(region, planner.machine,
                                                planner.initial.get(name, ()))
    planner._dirty.add(name)
    for li, reads, accesses in log:
        planner._mark((li, name))
        planner._mark((li, None))
        task_preds = planner.plans[li].task_preds
        for pi, _, _ in accesses:
            task_preds[pi].pop(name, None)
        if reads:
            planner._plan_reads(rp, name, li, reads)
        else:
            planner.region_nodes.pop((li, name), None)
        planner._plan_accesses(rp, name, li, accesses)
    if remembered and planner.memo.max_nodes:
        planner._frozen.add(rp)
        if planner.memo.put(key, region_plan(planner, name, log)):
            planner._read_groups.clear()


def remember_current(planner, names) -> None:
    """Before replace() re-plans regions `names`: put each one's current plan in the memo
    under its current key, unless a plan ending in its RegionPlanner is held there already.
    A plan made by the session's build (add_launch, or installed from its class) was never
    remembered, and a search comes straight back to it: a rejected pair move changes its
    first operator back, a rejected proposal's neighbour is proposed again."""
    memo = planner.memo
    if not memo.max_nodes:
        return
    for name in names:
        rp = planner.planners.get(name)
        log = planner.log.get(name)
        if rp is None or not log or memo.holds_planner(rp):
            continue
        key = region_key(planner.regions[name], planner.initial.get(name, ()), log,
                         planner.plans)
        planner._frozen.add(rp)         # shared with the memo from now on
        if memo.put(key, region_plan(planner, name, log)):
            planner._read_groups.clear()


def region_plan(planner, name: str, log) -> RegionPlan:
    """What planning region `name` over `log` left in this planner (see RegionPlan)."""
    nodes, per_entry, size = [], [], 0
    for li, _, accesses in log:
        items = planner.region_nodes.get((li, name))
        nodes.append(items)
        size += len(items) if items else 0
        lp = planner.plans[li]
        preds, targets = lp.task_preds, lp.task_targets
        per_entry.append([(preds[pi][name], targets[pi][k]) for pi, k, _ in accesses])
    return RegionPlan(planner.planners[name], nodes, per_entry, size, name,
                      tuple(li for li, _, _ in log))


def adopt(planner, name: str, known: RegionPlan) -> None:
    """Put a remembered plan of region `name` in place: what replan_region's planning
    would have left (the same objects, so their groups are reused)."""
    planner.planners[name] = known.planner
    planner._dirty.add(name)
    region_nodes = planner.region_nodes
    for (li, _, accesses), items, per_access in zip(planner.log[name], known.nodes,
                                                    known.accesses):
        planner._mark((li, name))
        planner._mark((li, None))
        if items is None:
            region_nodes.pop((li, name), None)
        else:
            region_nodes[li, name] = items
        put_accesses(planner.plans[li], name, accesses, per_access)
