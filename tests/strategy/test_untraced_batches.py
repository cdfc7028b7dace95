"""An untraced run's batches in the calibrated prediction (strategy/untraced.py batch_tails):
the optimizer's updates an untraced executor runs as one batch per device pay one host step
a batch, where a traced run pays one before every update. On one process the tails are
exactly the LocalExecutor's own batches; on several ranks each rank's updates of one
optimizer whose gradients one bucket's collective all-reduces are one batch a device; the
calibrated timer gives a tail no host phase before its device work."""
import dataclasses

import pytest
import torch

from parallel_ops import SGD, Model
from parallel_ops.lowering import lower
from strategy.gradbuckets import buckets_of
from strategy.machines import DEVICE_SPECS, HostCost, cluster_model
from strategy.preemption import PreemptedTimer
from strategy.untraced import UntracedCosts, batch_tails
from taskrt import Machine
from taskrt.executor.steps import batchable
from taskrt.planner import plan
from taskrt.taskgraph import TASK


def _mlp(layers=4):
    m = Model("mlp", seed=0, dtype="float32")
    h = m.input("x", (8, 6))
    for k in range(layers):
        h = m.linear(h, 6, name=f"fc{k}", activation="relu")
    m.softmax_cross_entropy(m.linear(h, 3, name="out"), m.input("labels", (8,), dtype="int64"),
                            name="loss")
    g = torch.Generator().manual_seed(0)
    return m, {"x": torch.randn(8, 6, generator=g),
               "labels": torch.randint(0, 3, (8,), generator=g)}


def _graph(machine):
    m, _ = _mlp()
    lowered = lower(m, {}, machine, SGD(lr=0.1))
    return plan(lowered.launches, machine, initial=lowered.initial)


def _updates(graph):
    return [n for n in graph.nodes if n.kind is TASK and batchable(n)]


def test_one_process_tails_are_the_local_executor_s_batches():
    m, feeds = _mlp()
    trainer = m.compile(Machine.local(1), {}, SGD(lr=0.1), executor="local")
    nodes = trainer.graph.nodes
    want = set()
    for entry in (e for e in trainer.executor.entries if len(e) > 1):    # the batches
        first = set()
        for i in entry:
            if nodes[i].device in first:
                want.add(i)
            first.add(nodes[i].device)
    assert want, "the executor formed no batch: the test checks nothing"
    assert batch_tails(trainer.graph) == want


def test_on_several_ranks_a_bucket_s_updates_are_one_batch_a_device():
    graph = _graph(Machine.grid(2, 1))
    updates = _updates(graph)
    assert len(updates) == 2 * 10               # 5 linear layers, weight and bias, 2 ranks
    buckets = buckets_of(graph, max_bytes=300)  # small buckets: several, of several each
    assert 1 < len(buckets) < 10
    assert len(buckets_of(graph)) == 1          # the executor's default: one for them all
    tails = batch_tails(graph, buckets)
    bucket_of = {m: k for k, b in enumerate(buckets) for m in b}
    for rank in (0, 1):
        for k in range(len(buckets)):
            mine = [n.id for n in updates if graph.machine.devices[n.device].rank == rank
                    and any(bucket_of.get(p) == k for p in graph.preds[n.id])]
            assert mine and set(mine) - tails == {mine[0]}
    assert batch_tails(graph, [(b,) for bucket in buckets for b in bucket]) == frozenset()


def test_a_tail_has_no_host_phase_before_its_device_work():
    graph = _graph(Machine.grid(2, 1))
    spec = dataclasses.replace(DEVICE_SPECS["P100"], kind="cpu")
    model = cluster_model("two", spec, 2).with_host_costs(
        {"task": HostCost(5e-5, 0.0), "send": HostCost(1e-5, 0.0), "recv": HostCost(1e-5, 0.0),
         "allreduce_start": HostCost(1e-5, 0.0), "allreduce_wait": HostCost(1e-5, 0.0),
         "copy": HostCost(1e-5, 0.0), "reduce": HostCost(1e-5, 0.0)})
    tails = batch_tails(graph, buckets_of(graph))
    assert tails
    batched = PreemptedTimer(model, UntracedCosts(batched=tails), 1.0, 0.0)
    alone = PreemptedTimer(model, UntracedCosts(), 1.0, 0.0)
    for n in _updates(graph):
        hd, _, _, _ = batched.host_phases(n)
        assert hd == (0.0 if n.id in tails else pytest.approx(5e-5))
        assert alone.host_phases(n)[0] == pytest.approx(5e-5)
        assert batched.timing(n) == alone.timing(n)        # the device work is the same
