"""Megatron-LM's expert strategy (strategy/experts.py) on the GPT app: which dim each
operator is split on, numerics equal to one device, bad degrees refused; and the model FLOPs
count of apps/gpt.py against the closed form."""
from __future__ import annotations

import argparse

import pytest
import torch

from apps.gpt import CONFIGS, build, model_flops
from parallel_ops import SGD
from strategy.experts import megatron
from taskrt import Machine


def small_gpt(batch: int = 4, dtype: str = "float64"):
    a = argparse.Namespace(small=True, config=None, seed=0, dtype=dtype, batch_size=batch,
                           vocab=None, width=None, heads=None, layers=None, seq_len=None)
    return build(a)


def test_megatron_splits_by_operator_role():
    net = small_gpt()
    s = megatron(net.model, 4, 4, tensor_parallel=2)
    text = {k: str(v) for k, v in s.items()}
    assert text["h0/attn"] == "[n=2,h=2]@0-3"          # QKV column, output row parallel
    assert text["h0/mlp_fc"] == "[n=2,o=2]@0-3"        # column parallel
    assert text["h0/mlp_proj"] == "[n=2,i=2]@0-3"      # row parallel (partial sums)
    assert text["lm_head"] == "[n=2,o=2]@0-3"          # vocabulary parallel logits
    assert text["loss"] == "[n=2,c=2]@0-3"             # vocabulary parallel cross entropy
    assert text["wte"] == "[n=2,v=2]@0-3"              # vocabulary parallel embedding
    assert text["h0/ln_1"] == "[n=4]@0-3"
    assert str(megatron(net.model, 4, 4, tensor_parallel=1)["h0/attn"]) == "[n=4]@0-3"


def test_megatron_trains_like_one_device():
    net = small_gpt()
    feeds = net.synthetic(0, 0)
    one = net.model.compile(Machine.local(1), {}, SGD(lr=0.1), executor="local")
    tp = net.model.compile(Machine.local(2), megatron(net.model, 2, 2, tensor_parallel=2),
                           SGD(lr=0.1), executor="local")
    for _ in range(2):
        assert tp.step(feeds) == pytest.approx(one.step(feeds), rel=1e-12, abs=1e-12)
    for w in net.model.weights:
        torch.testing.assert_close(tp.read(w.name), one.read(w.name), rtol=1e-9, atol=1e-9)


def test_megatron_refuses_a_degree_that_does_not_divide_a_node():
    net = small_gpt()
    with pytest.raises(ValueError, match=r"tensor-parallel degree 3 must divide the devices "
                                         r"per node \(4\).*use one of \[1, 2, 4\]"):
        megatron(net.model, 8, 4, tensor_parallel=3)


def test_model_flops_closed_form():
    # the 1.7B row (Narayanan et al. Table 1): 96 B s l h^2 (1 + s/6h + V/16lh)
    b, s, l, h, v = 512, 2048, 24, 2304, 51200
    want = 96 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))
    assert model_flops(b, s, l, h, v, recompute=True) == pytest.approx(want)
    assert model_flops(b, s, l, h, v) == pytest.approx(want * 72 / 96)
    assert model_flops(b, s, l, h, v, recompute=0.5) == pytest.approx(want * 84 / 96)
    # per layer the blocks' matmuls: 24 B s h^2 forward (QKV 6, out 2, MLP 16) + 4 B s^2 h
    # (scores and their product), times 3 with backward
    assert model_flops(1, s, 1, h, 0) == pytest.approx(3 * (24 * s * h * h + 4 * s * s * h))
    assert CONFIGS["7.5b"] == (32, 4096, 36)
