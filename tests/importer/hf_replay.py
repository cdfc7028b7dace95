"""Eager PyTorch training of a model whose dropout draws the imported model's masks.

Dropout masks of imported models come from parallel_ops/dropout.py's hash, not torch's RNG.
To compare training with dropout on, the eager run here replaces F.dropout and
F.scaled_dot_product_attention's dropout by the same masks: the k-th dropping call of a
forward uses the mask of the k-th dropping operator of the imported model (a capture
records calls in program order), at the trainer's step number.
"""
from __future__ import annotations

from contextlib import contextmanager
from unittest import mock

import torch
import torch.nn.functional as F

from harness import eager_steps
from parallel_ops.dropout import keep_mask
from taskrt.geometry import Rect


def dropping_ops(model):
    """The imported model's operators that draw a dropout mask, in program order."""
    return [op for op in model.ops if (op.type == "dropout" and op.params["p"] > 0) or
            (op.type == "sdpa" and op.params["dropout_p"] > 0)]


@contextmanager
def replayed_dropout(model, step):
    ops = iter(dropping_ops(model))
    real_sdpa = F.scaled_dot_product_attention

    def dropout(x, p=0.5, training=True, inplace=False):
        if not training or p == 0:
            return x
        op = next(ops)
        assert op.type == "dropout" and op.params["p"] == p, (op, p)
        keep = keep_mask(model.seed, step, op.name, p, x.shape, Rect.from_shape(x.shape))
        return x * keep * (1.0 / (1.0 - p))

    def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
        if dropout_p == 0:
            return real_sdpa(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale,
                             **kw)
        op = next(ops)
        assert op.type == "sdpa" and op.params["dropout_p"] == dropout_p, (op, dropout_p)
        if kw.get("enable_gqa"):        # eager Llama shares key/value heads this way
            k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        scores = q @ k.transpose(-2, -1) * scale
        if is_causal:           # eager HF skips an all-ones mask and says is_causal
            attn_mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril()
        if attn_mask is not None:
            scores = scores.masked_fill(~attn_mask, float("-inf")) \
                if attn_mask.dtype == torch.bool else scores + attn_mask
        probs = torch.softmax(scores, dim=-1)
        shape = tuple(probs.shape)
        keep = keep_mask(model.seed, step, op.name, dropout_p, shape, Rect.from_shape(shape))
        return (probs * keep * (1.0 / (1.0 - dropout_p))) @ v

    with mock.patch.object(F, "dropout", dropout), \
            mock.patch.object(F, "scaled_dot_product_attention", sdpa):
        yield
    assert next(ops, None) is None, "the forward dropped fewer times than the import"


def torch_steps_replayed(net, inputs, model, optimizer, steps):
    """Eager training on the model's own loss with the imported model's dropout masks."""
    def loss_of(net, step):
        with replayed_dropout(model, step):
            return net(**inputs).loss
    return eager_steps(net, loss_of, optimizer, steps)
