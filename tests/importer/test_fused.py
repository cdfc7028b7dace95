"""Groups of elementwise operators fused into one at import (parallel_ops/importer/fused.py):
HF GPT-2's tanh GELU becomes one operator, trains as eager PyTorch does (its forward bit-equal
to the unfused operators'), under a split too; tensors read outside a group stay its edges."""
import math
import os
import sys

import pytest
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import assert_state_close, torch_steps  # noqa: E402
from parallel_ops import SGD, ParallelConfig  # noqa: E402
from taskrt import Machine  # noqa: E402


def new_gelu(x):
    """transformers' NewGELUActivation (GPT-2's gelu_new)."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) *
                                       (x + 0.044715 * torch.pow(x, 3.0))))


class MLP(nn.Module):
    """linear, tanh GELU, linear; `leak`: a linear reads tanh's input too."""

    def __init__(self, leak=False):
        super().__init__()
        self.fc = nn.Linear(6, 8)
        self.proj = nn.Linear(8, 5)
        self.proj2 = nn.Linear(8, 5) if leak else None

    def forward(self, x):
        h = self.fc(x)
        if self.proj2 is None:
            return self.proj(new_gelu(h))
        inner = math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))
        return self.proj(0.5 * h * (1.0 + torch.tanh(inner))) + self.proj2(inner)


def _case(leak=False):
    torch.manual_seed(5)
    net = MLP(leak).double()
    g = torch.Generator().manual_seed(6)
    return net, (torch.randn(4, 3, 6, generator=g, dtype=torch.float64),), \
        torch.randint(0, 5, (4, 3), generator=g)


def _steps(net, inputs, labels, strategy, method, fuse=True):
    from parallel_ops.importer import import_module
    imp = import_module(net, inputs, method=method, fuse_elementwise=fuse)
    imp.add_cross_entropy()
    trainer = imp.model.compile(Machine.local(2), strategy, SGD(lr=0.1, momentum=0.9))
    feeds = imp.feeds(*inputs, labels=labels)
    losses = [trainer.step(feeds) for _ in range(2)]
    return losses, imp.state_dict(trainer.weights()), imp


@pytest.mark.parametrize("method", ["fx", "export"])
@pytest.mark.parametrize("split", [False, True])
def test_gelu_tanh_is_one_operator_and_trains_as_eager(method, split):
    net, inputs, labels = _case()
    probe, _, imp = _steps(net, inputs, labels, {}, method)
    fused = [o for o in imp.model.ops if o.type == "fused_elementwise"]
    assert len(fused) == 1 and len(fused[0].members) == 8
    assert not any(o.type.startswith("scalar_") or o.type in ("tanh", "multiply")
                   for o in imp.model.ops)
    strategy = {fused[0].name: ParallelConfig.of([0, 1], n=2, a1=1)} if split else {}
    losses, state, _ = _steps(net, inputs, labels, strategy, method)
    kept, kept_state, imp_kept = _steps(net, inputs, labels, {}, method, fuse=False)
    assert sum(o.type.startswith("scalar_") for o in imp_kept.model.ops) == 5
    assert losses[0] == kept[0]           # the same forward operations: the same loss
    assert losses == pytest.approx(kept, rel=1e-12)
    assert_state_close(state, kept_state, rtol=1e-12, atol=1e-14)
    want, want_state = torch_steps(net, inputs, labels, SGD(lr=0.1, momentum=0.9), 2)
    assert losses == pytest.approx(want, rel=1e-12)
    assert_state_close(state, want_state)


@pytest.mark.parametrize("method", ["fx", "export"])
def test_a_value_read_outside_stays_an_edge_of_its_group(method):
    net, inputs, labels = _case(leak=True)
    losses, state, imp = _steps(net, inputs, labels, {}, method)
    kept, kept_state, _ = _steps(net, inputs, labels, {}, method, fuse=False)
    assert losses[0] == kept[0]
    assert losses == pytest.approx(kept, rel=1e-12)
    assert_state_close(state, kept_state, rtol=1e-12, atol=1e-14)
    for op in imp.model.ops:               # no group hides a tensor another op reads
        if op.type == "fused_elementwise":
            inner = {id(m.outputs[0]) for m in op.members[:-1]}
            assert not any(id(t) in inner for o in imp.model.ops for t in o.inputs)
