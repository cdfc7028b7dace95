"""Planning a sequence of launches once (plan()), holding as little as possible at a time.

A planner that is never re-planned (Planner(replannable=False)) needs no state of a launch
once its node groups are built, and no state of a region once the last launch touching it
is planned. So this expands every launch first (the points a plan makes anyway, kept on
the launches' records until the end) to learn each region's last launch and the regions
planned alike (planned once: regionclasses.py), then plans launch by launch: builds the
launch's groups at once (its nodes' predecessors refer only to earlier groups and its own), drops its per-point preds and Red+ targets and its read node
lists, and retires the region planners whose last launch it was (their buffers' accesses
and valid pieces, most of a large plan's memory), keeping only what finish() copies into
the graph. Such a planner also makes a region's planner at its first launch, not at the
start (Planner.__init__): a model's weights and optimizer state are initial data on every
device, and an optimizer's state is touched only by the last launches. The graph is exactly the one planning all launches and then building the groups
gives (the same groups, built in the same program order).
"""
from __future__ import annotations

from operator import itemgetter
from typing import Iterable

from .errors import PlanError
from .graphview import region_info
from .regionclasses import RegionClasses
from .regionshapes import moved_info


def plan_once(planner, launches: Iterable) -> None:
    """Add `launches` (in program order) to `planner`, a Planner(replannable=False), as
    above; then planner.finish(release=True) gives the graph."""
    if planner.replannable:
        raise PlanError("plan_once: the planner keeps a re-planning log (replannable=True); "
                         "its launch and region state must stay. Use add_launch instead.")
    launches = launches if hasattr(launches, "__getitem__") else list(launches)
    # (by index: iterating `launches` below is what advances a progress bar, apps/progress.py)
    expanded = [planner._expand(launches[i]) for i in range(len(launches))]
    base = len(planner.plans)
    classes = planner._classes = RegionClasses.find(planner, launches, expanded, base,
                                                     shapes=True)
    retire_after: dict[int, list[str]] = {}         # launch -> regions it touches last
    for name, li in classes.last_use.items():
        retire_after.setdefault(li, []).append(name)
    for i, launch in enumerate(launches):
        li = len(planner.plans)
        planner.add_launch(launch, expanded[i])
        expanded[i] = None
        classes.release(li)
        planner.refresh()
        _drop_launch_state(planner, li)
        for name in retire_after.get(li, ()):
            retire_region(planner, name)
    planner._classes = None
    for name, rp in planner.planners.items():
        if rp is None and name not in planner._region_info:
            retire_region(planner, name)


def _drop_launch_state(planner, li: int) -> None:
    """What launch `li`'s groups were built from: no later launch reads it in a one-shot
    plan (a state_from launch reads only the source's points, kept)."""
    lp = planner.plans[li]
    for name in lp.read_order:
        planner.region_nodes.pop((li, name), None)
    lp.task_preds = lp.task_targets = lp.refs = lp.columns = None
    planner._tasks.clear()
    planner._marked.clear()


def retire_region(planner, name: str) -> None:
    """Region `name` is planned for good: keep what finish() copies into the graph (its
    buffers' bounding rects, initial and final valid pieces, pending sums) and drop its
    RegionPlanner. The name stays in planner.planners (None) so the graph's region order
    is as before."""
    rp = planner.planners.get(name)
    if rp is None:                  # (an initial region no launch touched)
        rp = planner._planner(name)
    info = region_info(planner, rp)
    shift = planner._shifted.pop(name, None)
    if shift is not None:           # (its template's end state, moved: regionshapes.py)
        info = moved_info(planner, rp, info, shift, planner.regions[name].rect)
    planner._region_info[name] = info
    planner.planners[name] = None
    planner._dirty.discard(name)


def check_initial(region, pieces, machine, fine: set | None = None) -> None:
    """What RegionPlanner checks of a region's initial pieces (devices, bounds). A model's
    weights are pieces on every device, a few distinct rects: so the distinct devices and
    rects are checked (C loops over the pieces); only where one fails, or a piece is not a
    (rect, int device) pair, the pieces are walked in order for the first error's message.
    `fine`: pieces found fine, kept by a caller checking many regions on one machine while
    it holds all their pieces (so no id is reused): a region of the same rect whose pieces
    are the very same objects in order (a weight and its optimizer state; the weights of
    blocks alike, which the lowering gives one set of pieces) passes without a check."""
    key = None
    if fine is not None:
        key = (region.rect, tuple(map(id, pieces)))
        if key in fine:
            return
    if not _all_fine(region, pieces, machine):
        walk_initial(region, pieces, machine)
    if key is not None:
        fine.add(key)


def walk_initial(region, pieces, machine) -> None:
    """check_initial piece by piece, in order (the first bad piece raises)."""
    seen = set()
    for rect, device in pieces:
        machine[device]
        if rect not in seen:
            seen.add(rect)
            if not region.rect.contains(rect):
                raise PlanError(f"Initial data of '{region.name}': {rect} is outside the "
                                f"region {region.rect}.")


def _all_fine(region, pieces, machine) -> bool:
    """check_initial's fast path: whether every piece is a (rect, device) pair on a device of
    `machine` inside the region (False when any is not, or cannot be told so)."""
    try:
        if not pieces or set(map(len, pieces)) != {2}:
            return False
        if set(map(type, map(itemgetter(1), pieces))) != {int}:
            return False            # (a set of devices would take 0.0 for 0)
        devices = set(map(itemgetter(1), pieces))
        if not (min(devices) >= 0 and max(devices) < len(machine.devices)):
            return False
        rects = list(map(itemgetter(0), pieces))
        # (the pieces of a replicated weight share a few rect objects: distinct by identity
        # without a Python __hash__ or __eq__ per piece; by value where they are not)
        distinct = dict(zip(map(id, rects), rects)).values()
        if 4 * len(distinct) > len(rects):
            distinct = set(rects)
        return all(map(region.rect.contains, distinct))
    except Exception:           # (the walk in order raises the first piece's error)
        return False
