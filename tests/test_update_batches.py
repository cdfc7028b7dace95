"""The local executor runs a device's optimizer updates as one batch (IndexLaunch.batch,
optimizer.update_many): the same bits as one update task per weight part, for every
optimizer setting, with replicas on several devices; a failing batch names its tasks."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "mpi"))

from models import cnn, cnn_strategies, lstm_model, lstm_strategies  # noqa: E402
from parallel_ops import SGD, Adam  # noqa: E402
from taskrt import Machine  # noqa: E402
from taskrt.errors import ExecutionError  # noqa: E402

OPTIMIZERS = {
    "sgd": lambda: SGD(lr=0.1),
    "momentum": lambda: SGD(lr=0.1, momentum=0.9, dampening=0.1),
    "nesterov_decay": lambda: SGD(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
    "adam": lambda: Adam(lr=0.01, weight_decay=0.01),
}
CASES = [(cnn, cnn_strategies, "data_parallel"), (cnn, cnn_strategies, "random"),
         (lstm_model, lstm_strategies, "parameter")]


def trained(build, strategies, name, make_optimizer, batched, steps=3, traced=None):
    """`traced`: per step, whether it is traced (record_trace on; default: every step when
    not batched)."""
    model, feeds = build()
    # A traced run times every node, so it runs each update as a task of its own.
    record = not batched or traced is not None
    tr = model.compile(Machine.local(4), strategies(4)[name], make_optimizer(),
                       executor="local", record_trace=record)
    sizes = [len(ids) for ids in (tr.executor.entries if batched else
                                  tr.executor.traced_entries)]
    losses = []
    for k in range(steps):
        if traced is not None:
            tr.executor.tracing = traced[k]
        losses.append(tr.step(feeds))
    return losses, tr.weights(), sizes


@pytest.mark.parametrize("opt", OPTIMIZERS)
@pytest.mark.parametrize("build,strategies,name", CASES,
                         ids=[f"{b.__name__}-{n}" for b, _, n in CASES])
def test_batched_updates_give_the_same_bits(build, strategies, name, opt):
    losses, weights, sizes = trained(build, strategies, name, OPTIMIZERS[opt], batched=True)
    ref_losses, ref_weights, ref_sizes = trained(build, strategies, name, OPTIMIZERS[opt],
                                                 batched=False)
    assert max(sizes) > 1 and max(ref_sizes) == 1
    assert losses == ref_losses
    for w, value in ref_weights.items():
        assert torch.equal(weights[w], value), w


@pytest.mark.parametrize("build,strategies,name", CASES[:2],
                         ids=[f"{b.__name__}-{n}" for b, _, n in CASES[:2]])
def test_untraced_and_traced_steps_of_one_executor_give_the_same_bits(build, strategies, name):
    """record_trace with only some steps traced (apps/training.py traces the last): the
    untraced steps batch, the traced one runs every update alone, the same numbers."""
    losses, weights, sizes = trained(build, strategies, name, OPTIMIZERS["sgd"], batched=True,
                                     traced=[False, True, False])
    ref_losses, ref_weights, _ = trained(build, strategies, name, OPTIMIZERS["sgd"],
                                         batched=False)
    assert max(sizes) > 1
    assert losses == ref_losses
    for w, value in ref_weights.items():
        assert torch.equal(weights[w], value), w


def test_a_batch_holds_only_independent_updates_of_one_optimizer():
    model, feeds = cnn()
    tr = model.compile(Machine.local(4), {}, SGD(lr=0.1, momentum=0.9), executor="local")
    nodes = tr.graph.nodes
    batched = [ids for ids in tr.executor.entries if len(ids) > 1]
    assert batched
    updates = {n.id for n in nodes if n.kind == "task" and n.launch.name.endswith("/update")}
    assert {i for ids in batched for i in ids} == updates     # every update, nothing else
    for ids in batched:
        assert not any(p in ids for i in ids for p in tr.graph.preds[i])


class FailingSGD(SGD):
    def update_many(self, ps, gs, states):
        raise RuntimeError("no room")


def test_a_failing_batch_names_its_tasks_and_device():
    model, feeds = cnn()
    tr = model.compile(Machine.local(1), {}, FailingSGD(lr=0.1), executor="local")
    with pytest.raises(ExecutionError, match=r"batch of \d+ tasks \(\S+/update, .* failed on "
                                             r"device 0: RuntimeError: no room"):
        tr.step(feeds)


class OneAtATime(SGD):
    """An optimizer without update_many: one update task per part, as before."""
    update_many = None


def test_an_optimizer_without_update_many_runs_a_task_per_part():
    model, feeds = cnn()
    tr = model.compile(Machine.local(2), {}, SGD(lr=0.1), executor="local")
    ref = model.compile(Machine.local(2), {}, OneAtATime(lr=0.1), executor="local")
    assert max(len(ids) for ids in ref.executor.entries) == 1
    assert tr.step(feeds) == ref.step(feeds)
