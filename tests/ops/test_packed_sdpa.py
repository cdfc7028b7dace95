"""PackedSDPA (parallel_ops/importer/packed_attention.py): sdpa on q, k, v and an output laid
out (N, S, H*D), heads side by side. Every legal config (sample, heads, query positions)
equals PyTorch's scaled_dot_product_attention on the (N, H, S, D) views, with no mask, a
causal one, a padding mask, an additive one (learned too), dropout, and one tensor as q, k
and v; parts run sdpa's own backward."""
import pytest
import torch
import torch.nn.functional as F

from parallel_ops import Model
from parallel_ops.importer.extra_ops import SDPA
from parallel_ops.importer.packed_attention import PackedSDPA
from oracle import assert_matches, legal_configs

N, H, S, D = 4, 2, 3, 2


def net(mask=None, causal=False, dropout_p=0.0, shared=False):
    m = Model("att", seed=1, dtype="float64")
    q, k, v = (m.input(t, (N, S, H * D), requires_grad=True) for t in "qkv")
    if shared:
        k = v = q
    y = m.input("y", (N,), dtype="int64")
    g = torch.Generator().manual_seed(3)
    feeds = {t: torch.randn(N, S, H * D, generator=g, dtype=torch.float64) for t in "qkv"}
    feeds["y"] = torch.randint(0, 3, (N,), generator=g)
    mt = None
    if mask == "padding":
        mt = m.input("mask", (N, 1, S, S), dtype="bool")
        feeds["mask"] = torch.ones(N, 1, S, S, dtype=torch.bool)
        feeds["mask"][1, :, :, -1] = False
    elif mask in ("additive", "learned"):
        mt = m.input("mask", (N, H, S, S), requires_grad=mask == "learned")
        feeds["mask"] = torch.randn(N, H, S, S, generator=g, dtype=torch.float64)
    op = m.add_op(PackedSDPA(m, q, k, v, H, causal, None, name="op", mask=mt,
                             dropout_p=dropout_p))
    flat = m.reshape(op.outputs[0], (N, H * S * D), name="r")
    m.softmax_cross_entropy(m.linear(flat, 3, name="fc"), y, name="loss")
    return m, feeds


KINDS = {"none": {}, "causal": {"causal": True}, "padding": {"mask": "padding"},
         "additive": {"mask": "additive"}, "learned": {"mask": "learned"},
         "dropout": {"mask": "padding", "dropout_p": 0.3},
         "shared": {"shared": True, "causal": True, "dropout_p": 0.3}}
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


def test_reference_is_torch_on_the_heads_views():
    m, feeds = net(mask="padding")
    op = m.op("op")
    op.training = False
    q, k, v, mask = (feeds[t] for t in ("q", "k", "v", "mask"))
    heads = [t.view(N, S, H, D).transpose(1, 2) for t in (q, k, v)]
    want = F.scaled_dot_product_attention(*heads, attn_mask=mask).transpose(1, 2).reshape(
        N, S, H * D)
    assert torch.allclose(op.reference([q, k, v, mask], [])[0], want)
