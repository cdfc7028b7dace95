"""Attention's head split and merge folded into the attention operator at import
(parallel_ops/importer/packed_attention.py): none of the eight reshapes and transposes is
left, training is bit-equal to the unfolded import under splits of the sample, the heads
and the queries (with dropout, a padding mask or causal), and the fold stays out where a
heads tensor is read elsewhere."""
import os
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import assert_state_close, torch_steps  # noqa: E402
from parallel_ops import SGD, ParallelConfig  # noqa: E402
from parallel_ops.importer import api, import_module  # noqa: E402
from taskrt import Machine  # noqa: E402

H = 2


class Attention(nn.Module):
    """q, k, v projections, heads split, sdpa, heads merged, output projection, as HF's
    BERT; `leak` also reads the heads of q elsewhere."""

    def __init__(self, causal=False, dropout=0.0, leak=False):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(8, 8) for _ in range(4))
        self.causal, self.dropout, self.leak = causal, dropout, leak

    def heads(self, t):
        return t.view(t.size(0), t.size(1), H, 4).transpose(1, 2)

    def forward(self, x, mask=None):
        q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal,
                                           dropout_p=self.dropout if self.training else 0.0)
        out = self.o(a.transpose(1, 2).reshape(x.size(0), x.size(1), 8))
        return out + q.transpose(1, 2).reshape(out.shape) if self.leak else out


def _case(**kw):
    torch.manual_seed(7)
    net = Attention(**kw).double()
    g = torch.Generator().manual_seed(8)
    x = torch.randn(4, 5, 8, generator=g, dtype=torch.float64)
    return net, x, torch.randint(0, 8, (4, 5), generator=g)


def _steps(net, inputs, labels, strategy, method="export"):
    imp = import_module(net, inputs, method=method)
    imp.add_cross_entropy()
    trainer = imp.model.compile(Machine.local(2), strategy, SGD(lr=0.1, momentum=0.9))
    feeds = imp.feeds(*inputs, labels=labels)
    losses = [trainer.step(feeds) for _ in range(2)]
    return losses, imp.state_dict(trainer.weights()), imp


SPLITS = {"data_parallel": {}, "heads": {"h": 2}, "queries": {"s": 2}}
KINDS = {"plain": {}, "causal": {"causal": True}, "dropout": {"dropout": 0.3}}


@pytest.mark.parametrize("method", ["fx", "export"])
@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("split", sorted(SPLITS))
def test_folded_attention_trains_bit_equal_to_the_unfolded(method, kind, split,
                                                           monkeypatch):
    net, x, labels = _case(**KINDS[kind])
    name = "scaled_dot_product_attention"
    strategy = {name: ParallelConfig.of([0, 1], **SPLITS[split])} if SPLITS[split] else {}
    losses, state, imp = _steps(net, (x,), labels, strategy, method)
    assert not any(o.type in ("reshape", "transpose") for o in imp.model.ops)
    assert type(imp.model.op(name)).__name__ == "PackedSDPA"
    monkeypatch.setattr(api, "fold_attention_heads", lambda model, keep: {})
    kept, kept_state, imp_kept = _steps(net, (x,), labels, strategy, method)
    assert sum(o.type in ("reshape", "transpose") for o in imp_kept.model.ops) == 8
    assert losses == kept
    assert_state_close(state, kept_state, rtol=0, atol=0)
    if kind != "dropout":                   # eager's dropout draws other masks
        want, want_state = torch_steps(net, (x,), labels, SGD(lr=0.1, momentum=0.9), 2)
        assert losses == pytest.approx(want, rel=1e-12)
        assert_state_close(state, want_state)


def test_a_padding_mask_is_read_as_before(monkeypatch):
    net, x, labels = _case()
    mask = torch.ones(4, 1, 5, 5, dtype=torch.bool)
    mask[1, :, :, -2:] = False
    losses, state, imp = _steps(net, (x, mask), labels, {
        "scaled_dot_product_attention": ParallelConfig.of([0, 1], n=2)})
    assert type(imp.model.op("scaled_dot_product_attention")).__name__ == "PackedSDPA"
    want, want_state = torch_steps(net, (x, mask), labels, SGD(lr=0.1, momentum=0.9), 2)
    assert losses == pytest.approx(want, rel=1e-12)
    assert_state_close(state, want_state)


@pytest.mark.parametrize("method", ["fx", "export"])
def test_no_fold_where_a_heads_tensor_is_read_elsewhere(method):
    net, x, labels = _case(leak=True)
    losses, state, imp = _steps(net, (x,), labels, {}, method)
    assert not any(type(o).__name__ == "PackedSDPA" for o in imp.model.ops)
    want, want_state = torch_steps(net, (x,), labels, SGD(lr=0.1, momentum=0.9), 2)
    assert losses == pytest.approx(want, rel=1e-12)
    assert_state_close(state, want_state)
