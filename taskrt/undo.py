"""What one Planner.replace() changes, saved before it does, so that Planner.undo() can put
it back exactly (the search undoes most of its proposals): see PlanUndo."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:                       # the planner imports this module
    from .planner import Planner


class PlanUndo:
    """What one replace() changes in a Planner, saved before it does, to put back on undo().

    Saved: the replaced launches' LaunchPlans (replace() makes new ones, so the old stay as
    they were); for every region the replace touches (given initial data, used by a replaced
    launch before or after), its planner, log, initial data, finish() info and whether it
    was dirty, and, for each other launch in its log, the read nodes and the tasks' preds
    and Red+ targets for it; the regions the replace declared; and the node groups the
    replace made stale, with the set of stale groups before it. Noted while the planner
    changes them (only what changes, so that a proposal costs what it touches): the state
    sources of the other launches replace() gives new ones, and the task nodes (_tasks
    entries) replace() and the refresh() after it drop or make."""
    __slots__ = ("plans", "regions", "pred_entries", "target_entries", "tasks", "state_src",
                 "dirty", "new_regions", "groups", "stale")

    @classmethod
    def record(cls, p: "Planner", expanded, initial, new_regions: list) -> "PlanUndo":
        """`expanded`: per replaced launch (index, launch, points, reads, accesses), as
        replace() holds them (launchplan.by_region's reads and accesses)."""
        u = cls()
        u.plans = {li: p.plans[li] for li, *_ in expanded}
        names = {r.name for r in initial}
        for li, _, _, _, accesses in expanded:
            names.update(p.plans[li].regions)
            names.update(accesses)          # (the regions the new points name)
        u.regions = {}
        u.pred_entries, u.target_entries = {}, {}
        replaced = u.plans
        for name in names:
            log = p.log.get(name)
            u.regions[name] = (p.planners.get(name), None if log is None else list(log),
                               p.initial.get(name), p._region_info.get(name),
                               {li: p.region_nodes.get((li, name)) for li, _, _ in log or ()})
            for li, _, accesses in log or ():
                if li in replaced:
                    continue
                preds, targets = p.plans[li].task_preds, p.plans[li].task_targets
                for pi, k, _ in accesses:
                    u.pred_entries[li, pi, name] = preds[pi].get(name)
                    u.target_entries[li, pi, k] = targets[pi][k]
        u.groups = {}
        u.stale = set(p._stale)
        u.tasks = {}                    # _tasks key -> its entry before (None: none)
        u.state_src = {}                # launch index -> its state sources before
        dirty = p._dirty
        u.dirty = {name: name in dirty for name in names}
        u.new_regions = new_regions
        return u

    def restore(self, p: "Planner") -> None:
        for li, lp in self.plans.items():
            if p.plans[li].launch.state_from != lp.launch.state_from:
                p._state_index = None
            p.plans[li] = lp
        for name, (planner, log, initial, info, nodes) in self.regions.items():
            for li, _, _ in p.log.get(name, ()):
                p.region_nodes.pop((li, name), None)
            _put(p.planners, name, planner)
            _put(p.log, name, log)
            _put(p.initial, name, initial)
            _put(p._region_info, name, info)
            for li, item in nodes.items():
                _put(p.region_nodes, (li, name), item)
        plans = p.plans
        for (li, pi, name), preds in self.pred_entries.items():
            _put(plans[li].task_preds[pi], name, preds)
        for (li, pi, k), targets in self.target_entries.items():
            plans[li].task_targets[pi][k] = targets
        for li, state_src in self.state_src.items():
            plans[li].state_src = state_src
        for key, node in self.tasks.items():
            _put(p._tasks, key, node)
        for name, dirty in self.dirty.items():
            if dirty:
                p._dirty.add(name)
            else:
                p._dirty.discard(name)
        for name in self.new_regions:
            del p.regions[name]
        # A new version once per launch, in first order, for the launches given back other
        # group objects (a group the replace's refresh rebuilt as it was is the same one).
        relaunched = {}
        groups = p._groups
        for key, group in self.groups.items():
            if groups.get(key) is group:
                continue
            _put(groups, key, group)
            if key[0] < len(plans):
                relaunched[key[0]] = None
        for li in relaunched:
            p._new_version(li)
        p._stale = set(self.stale)


def _put(d: dict, key, value) -> None:
    """d[key] = value, or no key when value is None."""
    if value is None:
        d.pop(key, None)
    else:
        d[key] = value
