"""Reshapes the import folds into the linear they feed (parallel_ops/importer/folds.py): left
out where HF's Conv1D pattern allows it, with bit-equal training; kept wherever the product
or the reshape is used otherwise."""
import os
import sys

import pytest
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import assert_state_close, imported_steps, torch_steps  # noqa: E402
from parallel_ops import SGD, ParallelConfig  # noqa: E402
from parallel_ops.importer import folds  # noqa: E402
from taskrt import Machine  # noqa: E402


class Conv1DLike(nn.Module):
    """x.view(-1, E) @ W + b viewed back, as transformers' Conv1D; `extra` uses the 2-d
    product or the 2-d input besides (where the reshapes must stay)."""

    def __init__(self, extra=None, addmm=False):
        super().__init__()
        self.addmm = addmm                              # torch.addmm (torch.fx has no converter)
        self.w1 = nn.Parameter(torch.randn(6, 8) / 3)
        self.b1 = nn.Parameter(torch.randn(8) / 3)
        self.w2 = nn.Parameter(torch.randn(8, 5) / 3)
        self.extra = extra

    def forward(self, x):                               # x: (N, S, 6)
        flat = x.view(-1, x.size(-1))
        h = torch.addmm(self.b1, flat, self.w1) if self.addmm else flat @ self.w1
        if self.extra == "product":                     # the 2-d product read as 2-d
            h = h + h[:1]
        y = h.view(x.size()[:-1] + (8,))
        y = torch.tanh(y if self.addmm else y + self.b1)
        if self.extra == "input":                       # the 2-d input read again (E == 8)
            y = y + (flat @ self.w1).view(x.size()[:-1] + (8,))
        out = (y.reshape(-1, 8) @ self.w2).view(x.size()[:-1] + (5,))
        return out.reshape(-1, 5)


def _case(extra=None, method="export"):
    torch.manual_seed(3)
    net = Conv1DLike(extra, addmm=method == "export").double()
    g = torch.Generator().manual_seed(4)
    x = torch.randn(4, 3, 6, generator=g, dtype=torch.float64)
    return net, (x,), torch.randint(0, 5, (12,), generator=g)


STRATEGIES = {"data_parallel": {},
              "split_o": {"w1": ParallelConfig.of([0, 1], o=2)}}


@pytest.mark.parametrize("method", ["fx", "export"])
@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_conv1d_pattern_imports_without_reshapes_and_trains_bit_equal(method, strategy,
                                                                      monkeypatch):
    net, inputs, labels = _case(method=method)
    strat = STRATEGIES[strategy]             # the linear is named after its weight: w1
    losses, state, imp, _ = imported_steps(net, inputs, labels, strat, Machine.local(2), SGD(
        lr=0.1, momentum=0.9), 2, method)
    linears = [o for o in imp.model.ops if o.type == "linear"]
    assert [o.name for o in linears] == ["w1", "w2"]
    assert all(o.inputs[0].ndim == 3 for o in linears)
    # only the module's own final reshape to (N*S, 5) is left
    assert [o.outputs[0].shape for o in imp.model.ops if o.type == "reshape"] == [(12, 5)]
    monkeypatch.setattr(folds, "into_linear", lambda ctx, x, shape: False)
    kept, kept_state, imp_kept, _ = imported_steps(net, inputs, labels, strat, Machine.local(2),
                                                   SGD(lr=0.1, momentum=0.9), 2, method)
    assert sum(o.type == "reshape" for o in imp_kept.model.ops) == 5
    assert losses == kept
    assert_state_close(state, kept_state, rtol=0, atol=0)
    want, want_state = torch_steps(net, inputs, labels, SGD(lr=0.1, momentum=0.9), 2)
    assert losses == pytest.approx(want, rel=1e-12)
    assert_state_close(state, want_state)


@pytest.mark.parametrize("method", ["fx", "export"])
@pytest.mark.parametrize("extra", ["product", "input"])
def test_reshapes_stay_where_their_2d_values_are_used(method, extra):
    net, inputs, labels = _case(extra, method)
    losses, state, imp, _ = imported_steps(net, inputs, labels, {}, Machine.local(2), SGD(
        lr=0.1, momentum=0.9), 2, method)
    first = next(o for o in imp.model.ops if o.type == "linear")
    assert first.inputs[0].ndim == 2               # this one was not folded
    want, want_state = torch_steps(net, inputs, labels, SGD(lr=0.1, momentum=0.9), 2)
    assert losses == pytest.approx(want, rel=1e-12)
    assert_state_close(state, want_state)
