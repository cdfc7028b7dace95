"""Region plans remembered by what they depend on, for a search that comes back to them.

A region's plan -- its RegionPlanner's end state, the copy/reduce/all-reduce nodes each launch's
reads of it need, and the predecessors and Red+ targets of every task requirement on it -- is
a function of the region's initial data and, per launch touching it in program order, of what
the launch's points ask of it (point, device, rect, privilege) and whether the launch is one
of replicas; of nothing else (regions are planned independently, coherence.py). That tuple, without
the region's name or the launches' indices, is the plan's key here: regions planned alike
share it (regionclasses.py), and a plan made for one is moved to another by
regionclasses.stamp.

Planner.replace re-plans every region a changed launch touches. An MCMC search proposes
configs near the current strategy (neighbours, the regular configs experts use) and undoes
most proposals, so the same region logs come back: re-planned regions of Inception-v3 on 16
GPUs whose key had been planned before, per fifth of a 240 s search: 6%, 33%, 54%, 61%, 65%.
Such a region takes its remembered plan (the same node objects, so their read groups and the
simulator's per-group arrays are reused too) instead of being planned again.

The table holds at most `max_nodes` nodes (Settings.plan_memo_nodes, TASKRT_PLAN_MEMO_NODES;
each with its planner state, about 1-2 KB); past that it is emptied and fills again with what
the search visits now. A plan that made no node (a region whose launches needed no copy)
still holds its planner state and key: it counts as one, so that a table of such plans is
bounded too (AlexNet @16: 38% of the remembered plans made no node).
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass


@dataclass(eq=False, slots=True)
class RegionPlan:
    """What planning one region gave, aligned with its log (Planner.log[name]): per log entry,
    the read nodes of that launch (or None), and per access of the entry, the point's
    predecessor refs on the region and the requirement's Red+ targets. `name` and `lis`: the
    region and its log's launches it was made for (another region of the same key gets a
    copy moved to its own: regionclasses.stamp)."""
    planner: object                   # the RegionPlanner at the end of the log
    nodes: list                       # per log entry: list of (node, refs, staged) or None
    accesses: list                    # per log entry: [(preds, targets)] per access
    size: int                         # nodes made, for the table's bound
    name: str = ""
    lis: tuple = ()
    # Its read lists' refs compiled for moving (regionclasses.stamp_nodes), once asked for:
    # movedreads.compile_plan's list, or False where it gave none.
    moves: object = None


def region_key(region, initial, log, plans) -> tuple:
    """The key of a region's plan: its shape, dtype and initial pieces, and per log entry
    what the launch asks of it (key_signature: no requirement indices). No names: regions
    alike share a key.

    Nor requirement indices: planning reads an access's point, device, rect and privilege
    (RegionPlanner.access_points, in the accesses' order), never which requirement of the
    point it is; a plan's Red+ targets and preds are handed back in that order and put
    where each region's own accesses say (put_accesses). So two regions one launch asks
    alike under different requirements share their plan: an LSTM's weight_ih and weight_hh
    (equal shapes at NMT's sizes), bias_ih and bias_hh, their gradients and momenta, and its
    hidden and cell states or h_n and c_n where they make no copies -- 144 of the 679
    regions 40 random NMT @16 changes re-plan, each moved from the one planned first."""
    return (region.rect, region.dtype, tuple(initial),
            tuple(key_signature(plans[li].launch.replicas, plans[li].points, accesses)
                  for li, _, accesses in log))


def key_signature(replicas: bool, points, accesses) -> tuple:
    """What one launch asks of one region (its `accesses` [(point index, requirement index,
    requirement)], launchplan.by_region), as far as its plan depends on it (region_key;
    regionclasses.py's classes): whether it is one of replicas, then per access (point
    index, device, rect, privilege); not the requirement index."""
    return (replicas,) + tuple([(pi, points[pi][1], req.rect, req.privilege.code)
                                for pi, _, req in accesses])


class RegionPlanMemo:
    """Region plans by key (region_key), per key one for each region it was made for,
    bounded by the nodes they hold."""
    __slots__ = ("max_nodes", "_plans", "_nodes", "hits", "misses", "clears", "moved",
                 "_planners")

    def __init__(self, max_nodes: int):
        if max_nodes < 0:
            raise ValueError(f"RegionPlanMemo: max_nodes={max_nodes}; give 0 (remember "
                             "nothing) or more")
        self.max_nodes = max_nodes
        self._plans: dict[tuple, dict[str, RegionPlan]] = {}
        self._nodes = 0
        self.hits = self.misses = self.clears = 0
        self.moved = 0          # hits on a plan made for another region (Planner counts)
        # The RegionPlanners of the plans held (their end states), to tell whether a region's
        # current plan is held without making its key (holds_planner).
        self._planners: weakref.WeakSet = weakref.WeakSet()

    def __len__(self) -> int:
        return sum(len(plans) for plans in self._plans.values())

    @property
    def nodes(self) -> int:
        """The nodes the remembered plans hold (a plan that made none counts as one)."""
        return self._nodes

    def holds_planner(self, rp) -> bool:
        """Whether a plan held here ends in RegionPlanner `rp` (so a region planned into `rp`
        has its plan, or one alike, held)."""
        return rp in self._planners

    def get(self, key: tuple, name: str = "") -> RegionPlan | None:
        """The plan of `key` made for region `name` if there is one, else one made for
        another region (to be moved: regionclasses.stamp), else None."""
        plans = self._plans.get(key)
        if plans is None:
            self.misses += 1
            return None
        self.hits += 1
        plan = plans.get(name)
        return plan if plan is not None else next(iter(plans.values()))

    def put(self, key: tuple, plan: RegionPlan) -> bool:
        """Remember `plan` (unless max_nodes is 0). Empties the table first when it would
        hold more than max_nodes nodes; returns True when it did."""
        if self.max_nodes == 0:
            return False
        emptied = False
        weight = max(plan.size, 1)          # a plan of no nodes still holds its state
        if self._nodes + weight > self.max_nodes and self._plans:
            self._plans.clear()
            self._planners = weakref.WeakSet()
            self._nodes = 0
            self.clears += 1
            emptied = True
        plans = self._plans.get(key)
        if plans is None:
            plans = self._plans[key] = {}
        old = plans.get(plan.name)
        if old is not None:
            self._nodes -= max(old.size, 1)
        plans[plan.name] = plan
        if plan.planner is not None:
            self._planners.add(plan.planner)
        self._nodes += weight
        return emptied
