"""sdpa (the importer's scaled dot-product attention): every legal config (sample, heads,
query positions) equals PyTorch with no mask, a causal one, a boolean key-padding mask
(N, 1, S, S), an additive mask (N, H, S, S) (also one that is learned: it gets a gradient),
attention dropout, and one tensor as q, k and v (causal self-attention); the dropout mask is
the split-independent one of parallel_ops/dropout.py applied to the attention weights.
Parts run SDPA's own backward (not autograd): counted. The same for PackedSDPA
(parallel_ops/importer/packed_attention.py: q, k, v and the output laid out (N, S, H*D),
heads side by side), against torch on the (N, H, S, D) views."""
import pytest
import torch
import torch.nn.functional as F

from parallel_ops import Model
from parallel_ops.dropout import keep_mask
from parallel_ops.importer.extra_ops import SDPA
from parallel_ops.importer.packed_attention import PackedSDPA
from taskrt import Rect
from oracle import assert_matches, legal_configs

N, H, S, D = 4, 2, 3, 2


def net(mask=None, causal=False, dropout_p=0.0, shared=False, packed=False):
    m = Model("att", seed=1, dtype="float64")
    shape = (N, S, H * D) if packed else (N, H, S, D)
    q, k, v = (m.input(t, shape, requires_grad=True) for t in "qkv")
    if shared:                      # self-attention: one tensor is q, k and v
        k = v = q
    y = m.input("y", (N,), dtype="int64")
    g = torch.Generator().manual_seed(3)
    feeds = {t: torch.randn(*shape, generator=g, dtype=torch.float64) for t in "qkv"}
    feeds["y"] = torch.randint(0, 3, (N,), generator=g)
    mt = None
    if mask == "padding":           # HF: True attends; row 1 pads its last key
        mt = m.input("mask", (N, 1, S, S), dtype="bool")
        feeds["mask"] = torch.ones(N, 1, S, S, dtype=torch.bool)
        feeds["mask"][1, :, :, -1] = False
    elif mask in ("additive", "learned"):
        mt = m.input("mask", (N, H, S, S), requires_grad=mask == "learned")
        feeds["mask"] = torch.randn(N, H, S, S, generator=g, dtype=torch.float64)
    op = m.add_op(PackedSDPA(m, q, k, v, H, causal, None, name="op", mask=mt,
                             dropout_p=dropout_p) if packed else
                  SDPA(m, q, k, v, causal, None, name="op", mask=mt, dropout_p=dropout_p))
    flat = m.reshape(op.outputs[0], (N, H * S * D), name="r")
    m.softmax_cross_entropy(m.linear(flat, 3, name="fc"), y, name="loss")
    return m, feeds


KINDS = {"none": {}, "causal": {"causal": True}, "padding": {"mask": "padding"},
         "additive": {"mask": "additive"}, "learned": {"mask": "learned"},
         "dropout": {"mask": "padding", "dropout_p": 0.3},
         "shared": {"shared": True, "causal": True, "dropout_p": 0.3}}
KINDS.update({f"packed-{k}": {**kw, "packed": True} for k, kw in list(KINDS.items())})
CASES = [(k, cfg) for k in KINDS for cfg in legal_configs(net(**KINDS[k])[0].op("op"), 4,
                                                          max_configs=10)]


@pytest.mark.parametrize("kind,cfg", CASES, ids=[f"{k}-{c}" for k, c in CASES])
def test_every_config(kind, cfg, monkeypatch):
    calls = []
    real = SDPA.backward

    def counted(self, *args, **kwargs):
        calls.append(self.name)
        return real(self, *args, **kwargs)
    monkeypatch.setattr(SDPA, "backward", counted)
    assert_matches(*net(**KINDS[kind]), {"op": cfg})
    assert len(calls) == 2 * len(cfg.devices)      # 2 steps, every part: its own backward


def test_reference_is_torch_and_dropout_uses_the_hash_mask():
    m, feeds = net(mask="padding", dropout_p=0.3)
    op = m.op("op")
    q, k, v, mask = (feeds[t] for t in ("q", "k", "v", "mask"))
    op.training = False
    assert torch.allclose(op.reference([q, k, v, mask], [])[0],
                          F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    op.training, m.step_count = True, 2
    probs = torch.softmax((q @ k.transpose(-2, -1) / D ** 0.5).masked_fill(~mask, -torch.inf),
                          -1)
    keep = keep_mask(m.seed, 2, "op", 0.3, (N, H, S, S), Rect.from_shape((N, H, S, S)))
    assert 0 < int((~keep).sum()) < keep.numel()
    assert torch.allclose(op.reference([q, k, v, mask], [])[0], probs * keep / 0.7 @ v)


def test_packed_reference_is_torch_on_the_heads_views():
    m, feeds = net(mask="padding", packed=True)
    op = m.op("op")
    op.training = False
    q, k, v, mask = (feeds[t] for t in ("q", "k", "v", "mask"))
    heads = [t.view(N, S, H, D).transpose(1, 2) for t in (q, k, v)]
    want = F.scaled_dot_product_attention(*heads, attn_mask=mask).transpose(1, 2).reshape(
        N, S, H * D)
    assert torch.allclose(op.reference([q, k, v, mask], [])[0], want)
