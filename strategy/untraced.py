"""What a run without --trace does that the traced runs a calibration fits do not: the
executors skip idle points (taskrt.executor.steps.idle: parallel_ops' empty parts, e.g.
batch norm's statistics stages under a config that splits no sample dim) except when
tracing, which times every node. A calibration's task times and host costs come from traced
runs, where such a node is an event of its own (its task, ~5 us of the executor's gap before
it); an untraced run spends nothing on it. Inception-v3 has 325-470 of them on 2 ranks in
most strategies (parameter parallel: 470 a rank, 4-6 ms of a traced iteration's 84-132 ms).

`UntracedCosts` is the CostModel of an untraced run: its `skipped` task nodes take no time,
and strategy/preemption.py's timer gives them no host phases either
(calibration.predict(traced=False), the default; the calibration's own residuals, which
compare with traced iterations, use traced=True).
"""
from __future__ import annotations

from taskrt.executor.steps import idle
from taskrt.taskgraph import TASK

from .costs import CostModel


def skipped_tasks(graph) -> frozenset:
    """The ids of graph's task nodes an untraced run skips (its idle points)."""
    return frozenset(n.id for n in graph.nodes if n.kind is TASK and idle(n))


class UntracedCosts(CostModel):
    """A CostModel whose `skipped` task nodes (skipped_tasks) take no time, and whose other
    task nodes take `executor_s` ({node id: seconds}) beyond their key's time: the
    executor's own work inside their events (strategy/reslicing.py). Per node, so only for a
    timer asked node by node (strategy/preemption.py's PreemptedTimer): the simulator's
    per-class arrays ask one node of a class."""

    def __init__(self, profile=None, *, skipped=frozenset(), executor_s=None, **kwargs):
        super().__init__(profile, **kwargs)
        self.skipped = frozenset(skipped)
        self.executor_s = executor_s or {}

    def task_time(self, node, spec) -> float:
        if node.id in self.skipped:
            return 0.0
        return super().task_time(node, spec) + self.executor_s.get(node.id, 0.0)
