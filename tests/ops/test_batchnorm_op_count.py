"""batchnorm2d's statistics launches run few aten operations (each costs the host a dispatch
per layer and iteration) and the same ones every call (the cost model counts a part's
operations on its first run, strategy.costs). Their values are tested against torch in
test_batchnorm.py (running statistics bit for bit in float32)."""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import parallel_ops.batchnorm  # noqa: F401  (attaches model.batchnorm2d)
from parallel_ops import SGD, Model, ParallelConfig
from taskrt import Machine


class Ops(TorchDispatchMode):
    """The aten operations run under it, by name."""
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


def stage_calls(momentum):
    """(bn, {stage name: a call of its function on a (4, 6, 5, 5) float32 input})."""
    m = Model("bn", seed=0, dtype="float32")
    m.batchnorm2d(m.input("x", (4, 6, 5, 5), requires_grad=True), name="bn",
                  momentum=momentum)
    bn = m.op("bn")
    m.step_count = 1                # momentum=None's first step
    x = torch.randn(4, 6, 5, 5, generator=torch.Generator().manual_seed(0))
    stats = bn._stats(None, [x], [])[0]
    centered = bn._centered(None, [x, stats], [])[0]
    running = [torch.zeros(6), torch.ones(6)]
    nxt = torch.rand(2, 6, generator=torch.Generator().manual_seed(1))
    stages = {s.name.split("/")[-1]: s for s in bn._training_stages}
    calls = {"centered": lambda: bn._centered(None, [x, stats], []),
             "running_next": lambda: bn._running_next(None, [stats, centered], running),
             "running_write": lambda: stages["running_write"]._forward(None, [nxt], running)}
    return bn, calls


def run_counted(call):
    with Ops() as ops:
        call()
    return ops.names


@pytest.mark.parametrize("stage,most", [("centered", 7), ("running_next", 14),
                                        ("running_write", 1)])
def test_statistics_stages_run_few_operations(stage, most):
    """Before: centered 8 (a row selected), running_next 19 (0-d momentum tensors made
    and converted every call, rows selected, a stack), running_write 2 (two selects)."""
    _, calls = stage_calls(0.1)
    names = run_counted(calls[stage])
    assert len(names) <= most, f"{stage}: {len(names)} aten operations: {names}"


def test_cumulative_momentum_runs_the_same_operations_every_step():
    """From the first call on: a momentum rounded once and kept fails it."""
    bn, calls = stage_calls(None)
    first = run_counted(calls["running_next"])
    bn.model.step_count = 7
    assert run_counted(calls["running_next"]) == first


def ops_per_launch(trainer) -> dict:
    """{launch name: aten operation names} of one iteration of a local trainer, its plan
    run entry by entry (after the trainer's own steps)."""
    ex = trainer.executor
    names = [ex.graph.nodes[ids[0]].describe().split()[1].split("[")[0]
             for ids in ex.entries]
    ops: dict = {}
    with Ops() as counter:
        ex.store.start_iteration()
        for name, (step, allocate, free) in zip(names, ex.plan):
            start = len(counter.names)
            if allocate:
                ex.store.begin(allocate)
            step()
            if free:
                ex.store.release(free)
            ops.setdefault(name, []).extend(counter.names[start:])
    return ops


@pytest.mark.parametrize("cfg", [ParallelConfig.of([0]), ParallelConfig.of([1, 0], c=2)],
                         ids=str)
def test_whole_samples_run_torch_batch_norm_only(cfg):
    """A config that splits no sample dim (one device, or channels only): normalize runs
    torch's kernel with the running statistics (what eager PyTorch runs); the statistics
    parts are empty, run nothing and are left out of the local executor's plan, and no
    zero gradient is made for the sums. Before:
    stats 2, centered 7, running_next 14 operations per part forward, and 6 for the sums'
    zero gradients in backward. (Values: test_batchnorm.py, bit for bit in float32.)"""
    m = Model("bn", seed=0, dtype="float32")
    x = m.input("x", (4, 6, 5, 5), requires_grad=True)
    y = m.batchnorm2d(x, name="bn", activation="relu")
    m.softmax_cross_entropy(y, m.input("labels", (4, 6, 5), dtype="int64"), name="loss")
    g = torch.Generator().manual_seed(0)
    feeds = {"x": torch.randn(4, 6, 5, 5, generator=g),
             "labels": torch.randint(0, 5, (4, 6, 5), generator=g)}
    trainer = m.compile(Machine.local(2), {"bn": cfg}, SGD(lr=0.1), executor="local")
    trainer.step(feeds)
    ops = ops_per_launch(trainer)
    for launch in ("stats/fwd", "centered/fwd", "running_next/fwd", "stats/bwd",
                   "centered/bwd"):
        # Their points are empty parts: the local executor leaves them out of its plan.
        assert f"bn/{launch}" not in ops, f"bn/{launch}: {ops[f'bn/{launch}']}"
    assert "aten.native_batch_norm.default" in ops["bn/normalize/fwd"]
    backward = ops["bn/normalize/bwd"]
    assert "aten.native_batch_norm_backward.default" in backward
    assert not any("zero" in name for name in backward), backward
