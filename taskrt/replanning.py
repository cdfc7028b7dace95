"""Changing a Planner's launches after they are planned (Planner.replace) and taking the
change back (Planner.undo): the re-planning path a search's proposals take. A replaced
launch's regions, and every region a new version of it touches, are planned again over their
logs (regionplans.replan_region); the groups of the launches touching them are rebuilt on the
next refresh(). undo.py records what a replace changes so that undo() puts it back.

A search comes back to the same few configs of an operator, and the lowering hands it the
same launch objects again (parallel_ops.lowering.IncrementalLowering), so a launch's
expanded points, its interference check and its points grouped by region (all functions of
the launch object and the planner's machine, read-only once made) are kept per planner and
launch object (`_expanded`, up to EXPANDED_POINTS points): in a search of the 2-step RNNLM
they were 14% of its CPU (sampled). A kept launch makes its regions known as expand() would,
in the same order.
"""
from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from itertools import islice
from operator import itemgetter
from typing import Iterable, Mapping, Sequence
from weakref import WeakKeyDictionary

from .errors import PlanError
from .geometry import Rect
from .interference import check_interference
from .launch import IndexLaunch
from .launchplan import LaunchPlan, by_region
from .region import Region
from .regionplans import remember_current, replan_region
from .undo import PlanUndo

# Points of the launches whose expansion a planner keeps (_expanded), at most: then it
# starts again (a point is a few hundred bytes with its grouping).
EXPANDED_POINTS = 1 << 16
# Planner -> {launch: (points, its regions in first-use order, reads, accesses)}, and the
# number of points held.
_kept: WeakKeyDictionary = WeakKeyDictionary()
_LAUNCH = itemgetter(0)         # a log entry's launch index


def _expanded(planner, launch: IndexLaunch) -> tuple[list, dict, dict]:
    """(points, reads, accesses): the launch expanded (regions made known), checked for
    interference and grouped by region (launchplan.by_region), kept for the next time this
    planner is given this launch object."""
    kept = _kept.get(planner)
    if kept is None:
        kept = _kept[planner] = [{}, 0]
    got = kept[0].get(launch)
    if got is not None:
        points, regions, reads, accesses = got
        known = planner.regions
        for region in regions:
            if known.get(region.name) is not region:
                planner._region(region)
        return points, reads, accesses
    points = planner._expand(launch)
    check_interference(launch, points)
    reads, accesses = by_region(points)
    regions = {}
    for _, _, reqs in points:
        for req in reqs:
            regions.setdefault(req.region.name, req.region)
    if kept[1] + len(points) > EXPANDED_POINTS:
        kept[0], kept[1] = {}, 0
    kept[0][launch] = (points, list(regions.values()), reads, accesses)
    kept[1] += len(points)
    return points, reads, accesses


def replace(planner, launches: Sequence[IndexLaunch],
            initial: Mapping[Region, Iterable[tuple[Rect, int]]] | None = None,
            record_undo: bool = False) -> set[str]:
    """Swap in new versions of existing launches (same names, e.g. another config of one
    operator), and new initial data for some regions, and re-plan the regions they touch,
    old or new. Returns those regions. With `record_undo`, `undo()` can then take the
    planner back to its state before this call (until the next replace or add_launch)."""
    if not planner.replannable:
        raise PlanError("replace: this planner was made with replannable=False (as plan() "
                        "makes one), so it kept no log to re-plan from. Make the Planner "
                        "with replannable=True to change its launches.")
    planner._undo = None
    planner._marked = set()
    num_regions = len(planner.regions)
    expanded = []
    for launch in launches:
        li = planner.index.get(launch.name)
        if li is None:
            raise PlanError(f"replace: no launch named '{launch.name}' in this plan.")
        expanded.append((li, launch) + _expanded(planner, launch))
    initial = {region: list(pieces) for region, pieces in (initial or {}).items()}
    remember_current(planner, {name for li, *_ in expanded for name in planner.plans[li].regions}
                     | {region.name for region in initial})
    for region in initial:
        planner._region(region)
    planner._undo = PlanUndo.record(planner, expanded, initial,
                                 list(islice(planner.regions, num_regions, None))) \
        if record_undo else None
    touched: set[str] = set()
    for region, pieces in initial.items():
        planner.initial[region.name] = pieces
        touched.add(region.name)
    for li, launch, points, reads, accesses in expanded:
        old = planner.plans[li]
        old_regions = old.regions
        touched.update(old_regions)
        planner._mark((li, None))
        for name in old.read_order:
            planner._mark((li, name))
        for pi in range(len(old.points)):
            planner._set_task((li, pi), None)
        # A new record: undo() puts the old one back as it was.
        lp = planner.plans[li] = LaunchPlan(launch, points, reads, accesses,
                                         [None] * len(points))
        lp.version = old.version
        if launch.state_from != old.launch.state_from:
            planner._state_index = None
        log = planner.log
        for name in old_regions:
            log[name] = [e for e in log[name] if e[0] != li]
            planner.region_nodes.pop((li, name), None)
        for name in accesses:
            # (a log is in launch order, one entry per launch: the new one goes where
            # sorting by launch index puts it)
            entries = log[name]
            at = bisect_left(entries, li, key=_LAUNCH)
            log[name] = entries[:at] + [(li, reads.get(name), accesses[name])] + entries[at:]
            touched.add(name)
    # Replaced launches, and launches whose state comes from one, get their sources again.
    undo = planner._undo
    for li in state_takers(planner, {launch.name for launch in launches}):
        lp = planner.plans[li]
        if undo is not None and li not in undo.plans:
            undo.state_src.setdefault(li, lp.state_src)
        lp.state_src = planner._state_sources(lp.launch, lp.points)
        planner._mark((li, None))
    for name in touched:
        replan_region(planner, name)
    if planner._undo is not None:        # the groups of before, to put back on undo
        planner._undo.groups = {key: planner._groups.get(key) for key in planner._marked}
    return touched


def state_takers(planner, names: set[str]) -> list[int]:
    """The launches (ascending) that take state (state_from) and are named in `names` or
    take it from a launch named there."""
    index = planner._state_index
    if index is None:
        index = planner._state_index = defaultdict(list)
        for li, lp in enumerate(planner.plans):
            launch = lp.launch
            if launch.state_from is not None:
                index[launch.name].append(li)
                index[launch.state_from].append(li)
    return sorted({li for name in names for li in index.get(name, ())})


def undo(planner) -> None:
    """Take the planner back to its state before the last `replace(..., record_undo=True)`
    (the next finish() gives the graph of then again, with the same node objects)."""
    saved, planner._undo = planner._undo, None
    if saved is None:
        raise PlanError("undo: nothing to undo; call replace(..., record_undo=True) first "
                        "(an add_launch or another replace since then forgets it).")
    saved.restore(planner)
