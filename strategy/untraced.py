"""What a run without --trace does that the traced runs a calibration fits do not: the
executors skip idle points (taskrt.executor.steps.idle: parallel_ops' empty parts, e.g.
batch norm's statistics stages under a config that splits no sample dim) except when
tracing, which times every node. A calibration's task times and host costs come from traced
runs, where such a node is an event of its own (its task, ~5 us of the executor's gap before
it); an untraced run spends nothing on it. Inception-v3 has 325-470 of them on 2 ranks in
most strategies (parameter parallel: 470 a rank, 4-6 ms of a traced iteration's 84-132 ms).

`UntracedCosts` is the CostModel of an untraced run: its `skipped` task nodes take no time,
and strategy/preemption.py's timer gives them no host phases either
(calibration.predict(traced=False), the default; the calibration's residuals of traces that
keep no untraced period compare with their traced iterations, traced=True).

Batches: an untraced run's executor runs the optimizer's updates that are ready together as
one batch per device (taskrt.launch, IndexLaunch.batch): one host step for the batch where a
traced run, which times each update alone, pays the executor's gap before every one (the
calibration's `task` host cost: 30 updates a rank of the Transformer --small, ~0.3 ms of a
3.5 ms iteration on 2 ranks). `batch_tails` are the members after each batch's first on its
device, which the timer gives no host phase before their device work: per process, the
batches steps.plan_entries forms (the LocalExecutor's own plan); on several ranks, where
the MPIExecutor batches what is ready at once, the updates of one batch key on a device
whose gradients one bucket's collective all-reduces (strategy/gradbuckets.py: they become
ready together when it ends); an update no collective waits for is its own batch.
"""
from __future__ import annotations

from taskrt.executor.steps import batch_key, batchable, idle, plan_entries
from taskrt.taskgraph import TASK

from .costs import CostModel


def skipped_tasks(graph) -> frozenset:
    """The ids of graph's task nodes an untraced run skips (its idle points)."""
    return frozenset(n.id for n in graph.nodes if n.kind is TASK and idle(n))


def batch_tails(graph, buckets=()) -> frozenset:
    """The ids of graph's task nodes an untraced run batches after another on their device
    (see the module doc): no host phase of their own. `buckets`: on several ranks, the
    MPI executor's gradient buckets (gradbuckets.buckets_of)."""
    nodes = graph.nodes
    if graph.machine.num_ranks == 1:
        groups = [e for e in plan_entries(nodes, graph.preds, range(len(nodes))) if len(e) > 1]
    else:
        bucket_of = {m: k for k, b in enumerate(buckets) for m in b}
        by_trigger: dict = {}
        for n in nodes:
            if n.kind is TASK and batchable(n):
                trigger = frozenset(bucket_of[p] for p in graph.preds[n.id] if p in bucket_of)
                if trigger:
                    by_trigger.setdefault((trigger, batch_key(n)), []).append(n.id)
        groups = list(by_trigger.values())
    tails = set()
    for ids in groups:
        first = set()
        for i in ids:
            d = nodes[i].device
            if d in first:
                tails.add(i)
            first.add(d)
    return frozenset(tails)


class UntracedCosts(CostModel):
    """A CostModel whose `skipped` task nodes (skipped_tasks) take no time, and whose other
    task nodes take `executor_s` ({node id: seconds}) beyond their key's time: the
    executor's own work inside their events (strategy/reslicing.py). Per node, so only for a
    timer asked node by node (strategy/preemption.py's PreemptedTimer): the simulator's
    per-class arrays ask one node of a class."""

    def __init__(self, profile=None, *, skipped=frozenset(), batched=frozenset(),
                 executor_s=None, **kwargs):
        super().__init__(profile, **kwargs)
        self.skipped = frozenset(skipped)
        self.batched = frozenset(batched)       # batch_tails: no host phase before them
        self.executor_s = executor_s or {}

    def task_time(self, node, spec) -> float:
        if node.id in self.skipped:
            return 0.0
        return super().task_time(node, spec) + self.executor_s.get(node.id, 0.0)
