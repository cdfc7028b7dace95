"""batchnorm2d's statistics launches run few aten operations (each costs the host a dispatch
per layer and iteration) and the same ones every call (the cost model counts a part's
operations on its first run, strategy.costs). Their values are tested against torch in
test_batchnorm.py (running statistics bit for bit in float32)."""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import parallel_ops.batchnorm  # noqa: F401  (attaches model.batchnorm2d)
from parallel_ops import Model


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
