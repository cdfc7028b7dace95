"""Region plans remembered by what they depend on, for a search that comes back to them.

A region's plan -- its RegionPlanner's end state, the copy/reduce/all-reduce nodes each launch's
reads of it need, and the predecessors and Red+ targets of every task requirement on it -- is
a function of the region's initial data and, per launch touching it in program order, of what
the launch's points ask of it (point, device, rect, privilege) and whether the launch is one
of replicas; of nothing else (regions are planned independently, coherence.py). That tuple is
the plan's key here.

Planner.replace re-plans every region a changed launch touches. An MCMC search proposes
configs near the current strategy (neighbours, the regular configs experts use) and undoes
most proposals, so the same region logs come back: re-planned regions of Inception-v3 on 16
GPUs whose key had been planned before, per fifth of a 240 s search: 6%, 33%, 54%, 61%, 65%.
Such a region takes its remembered plan (the same node objects, so their read groups and the
simulator's per-group arrays are reused too) instead of being planned again.

The table holds at most `max_nodes` nodes (Settings.plan_memo_nodes, TASKRT_PLAN_MEMO_NODES;
each with its planner state, about 1-2 KB); past that it is emptied and fills again with what
the search visits now.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(eq=False, slots=True)
class RegionPlan:
    """What planning one region gave, aligned with its log (Planner.log[name]): per log entry,
    the read nodes of that launch (or None), and per access of the entry, the point's
    predecessor refs on the region and the requirement's Red+ targets."""
    planner: object                   # the RegionPlanner at the end of the log
    nodes: list                       # per log entry: list of (node, refs, staged) or None
    accesses: list                    # per log entry: [(preds, targets)] per access
    size: int                         # nodes made, for the table's bound


def region_key(name: str, initial, log, plans) -> tuple:
    """The key of a region's plan: its name and initial pieces, and per log entry (launch
    index, replicas?, per access (point, requirement index, device, rect, privilege))."""
    return (name, tuple(initial),
            tuple((li, plans[li].launch.replicas,
                   tuple((pi, k, plans[li].points[pi][1], req.rect, req.privilege)
                         for pi, k, req in accesses))
                  for li, _, accesses in log))


class RegionPlanMemo:
    """Region plans by key (region_key), bounded by the nodes they hold."""
    __slots__ = ("max_nodes", "_plans", "_nodes", "hits", "misses", "clears")

    def __init__(self, max_nodes: int):
        if max_nodes < 0:
            raise ValueError(f"RegionPlanMemo: max_nodes={max_nodes}; give 0 (remember "
                             "nothing) or more")
        self.max_nodes = max_nodes
        self._plans: dict[tuple, RegionPlan] = {}
        self._nodes = 0
        self.hits = self.misses = self.clears = 0

    def __len__(self) -> int:
        return len(self._plans)

    @property
    def nodes(self) -> int:
        """The nodes the remembered plans hold."""
        return self._nodes

    def get(self, key: tuple) -> RegionPlan | None:
        plan = self._plans.get(key)
        if plan is None:
            self.misses += 1
        else:
            self.hits += 1
        return plan

    def put(self, key: tuple, plan: RegionPlan) -> bool:
        """Remember `plan` (unless max_nodes is 0). Empties the table first when it would
        hold more than max_nodes nodes; returns True when it did."""
        if self.max_nodes == 0:
            return False
        emptied = False
        if self._nodes + plan.size > self.max_nodes and self._plans:
            self._plans.clear()
            self._nodes = 0
            self.clears += 1
            emptied = True
        self._plans[key] = plan
        self._nodes += plan.size
        return emptied
