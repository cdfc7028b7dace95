"""Converters for torch.nn modules (torch.fx keeps these whole; see capture.py):

  Linear -> linear            Conv2d -> conv2d            BatchNorm2d -> batchnorm2d
  LayerNorm -> layernorm      Embedding -> embedding      LSTM -> lstm (one op per layer)
  MultiheadAttention -> multihead_attention (self-attention, no mask or a causal one)
  MaxPool2d / AvgPool2d / AdaptiveAvgPool2d -> max_pool2d / avg_pool2d / adaptive_avg_pool2d
  ReLU GELU Tanh Sigmoid Softmax Dropout -> relu gelu tanh sigmoid softmax dropout
  Flatten -> flat / reshape    Identity -> nothing   CrossEntropyLoss -> softmax_cross_entropy
Operators are named after the module's path ("layer1.0.conv1"), so their weights are named
like the state dict ("layer1.0.conv1.weight"). Layouts that differ from torch's (LSTM's
gate-major (4, H, I), attention's head-major in_proj) are converted by reshapes.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ..tensor import Tensor
from . import convert as fn
from .registry import register_module
from .values import Param, Stacked, Unsupported
from .weights import reshaped


@register_module(nn.Identity)
def identity(ctx, m, x, *args, **kwargs):
    return x


@register_module(nn.Linear)
def linear(ctx, m, x):
    return fn.linear(ctx, x, ctx.module_param(m, "weight"),
                     ctx.module_param(m, "bias") if m.bias is not None else None,
                     name=ctx.op_name())


@register_module(nn.Conv2d)
def conv2d(ctx, m, x):
    if m.padding_mode != "zeros":
        raise Unsupported(f"Conv2d padding_mode='{m.padding_mode}' (only 'zeros')")
    return fn.conv2d(ctx, x, ctx.module_param(m, "weight"),
                     ctx.module_param(m, "bias") if m.bias is not None else None,
                     m.stride, m.padding, m.dilation, m.groups, name=ctx.op_name())


@register_module(nn.BatchNorm2d)
def batchnorm2d(ctx, m, x):
    if not m.track_running_stats or m.running_mean is None:
        raise Unsupported("BatchNorm2d(track_running_stats=False)")
    if m.momentum is None and int(m.num_batches_tracked) != 0:
        raise Unsupported("BatchNorm2d(momentum=None) that has already counted "
                          f"{int(m.num_batches_tracked)} batches (the cumulative average "
                          "restarts from the importing step)")
    w = ctx.module_param(m, "weight") if m.affine else None
    b = ctx.module_param(m, "bias") if m.affine else None
    y = fn.batch_norm(ctx, x, ctx.module_param(m, "running_mean"),
                      ctx.module_param(m, "running_var"), w, b, m.training, m.momentum, m.eps,
                      name=ctx.op_name())
    nbt = ctx.module_param(m, "num_batches_tracked")
    ctx.count_steps(nbt.key, nbt.value)
    return y


@register_module(nn.LayerNorm)
def layernorm(ctx, m, x):
    w = ctx.module_param(m, "weight") if m.weight is not None else None
    b = ctx.module_param(m, "bias") if getattr(m, "bias", None) is not None else None
    return fn.layer_norm(ctx, x, m.normalized_shape, w, b, m.eps, name=ctx.op_name())


@register_module(nn.Embedding)
def embedding(ctx, m, idx):
    if m.max_norm is not None or m.scale_grad_by_freq or m.sparse:
        raise Unsupported("Embedding with max_norm, scale_grad_by_freq or sparse")
    return fn.embedding(ctx, idx, ctx.module_param(m, "weight"), m.padding_idx,
                        name=ctx.op_name())


@register_module(nn.ReLU)
def relu(ctx, m, x):
    return fn.relu(ctx, x)


@register_module(nn.Tanh)
def tanh(ctx, m, x):
    return fn.tanh(ctx, x)


@register_module(nn.Sigmoid)
def sigmoid(ctx, m, x):
    return fn.sigmoid(ctx, x)


@register_module(nn.GELU)
def gelu(ctx, m, x):
    return fn.gelu(ctx, x, m.approximate)


@register_module(nn.Softmax)
def softmax(ctx, m, x):
    return fn.softmax(ctx, x, m.dim if m.dim is not None else -1)


@register_module(nn.SiLU)
def silu(ctx, m, x):
    return fn.unary(ctx, "silu", x)


@register_module(nn.Dropout)
def dropout(ctx, m, x):
    return fn.dropout(ctx, x, m.p, True)


@register_module(nn.Flatten)
def flatten(ctx, m, x):
    return fn.flatten(ctx, x, m.start_dim, m.end_dim)


@register_module(nn.MaxPool2d)
def max_pool2d(ctx, m, x):
    return fn.max_pool2d(ctx, x, m.kernel_size, m.stride, m.padding, m.dilation, m.ceil_mode,
                         m.return_indices)


@register_module(nn.AvgPool2d)
def avg_pool2d(ctx, m, x):
    return fn.avg_pool2d(ctx, x, m.kernel_size, m.stride, m.padding, m.ceil_mode,
                         m.count_include_pad, m.divisor_override)


@register_module(nn.AdaptiveAvgPool2d)
def adaptive_avg_pool2d(ctx, m, x):
    return fn.adaptive_avg_pool2d(ctx, x, m.output_size)


@register_module(nn.CrossEntropyLoss)
def cross_entropy(ctx, m, logits, target):
    if m.weight is not None:
        raise Unsupported("CrossEntropyLoss with class weights")
    return fn.cross_entropy(ctx, logits, target, reduction=m.reduction,
                            label_smoothing=m.label_smoothing, name=ctx.op_name())


@register_module(nn.LSTM)
def lstm(ctx, m, x, hx=None):
    if not m.bias or m.bidirectional or m.proj_size:
        raise Unsupported("LSTM without biases, bidirectional or with projections")
    if m.dropout and m.num_layers > 1:
        raise Unsupported(f"LSTM dropout {m.dropout} between layers")
    layers = [[ctx.module_param(m, f"{w}_l{k}") for w in ("weight_ih", "weight_hh", "bias_ih",
                                                         "bias_hh")]
              for k in range(m.num_layers)]
    return lstm_layers(ctx, x, hx, layers, m.hidden_size, m.batch_first, ctx.path)


def lstm_layers(ctx, x, hx, layers, hidden: int, batch_first: bool, base: str):
    """torch's (output, (h_n, c_n)) from one lstm op per layer."""
    with ctx.naming(f"{base}.in"):
        x = ctx.tensor(x)
        if not batch_first:
            x = fn.transpose(ctx, x, 0, 1)
        state = None
        if hx is not None:
            h0, c0 = hx
            if not all(isinstance(v, torch.Tensor) and not torch.any(v) for v in (h0, c0)):
                h0, c0 = ctx.tensor(h0), ctx.tensor(c0)      # zeros are the default
                state = [(fn.index(ctx, h0, k), fn.index(ctx, c0, k))
                         for k in range(len(layers))]
    y, finals = ctx.model.lstm(x, hidden, len(layers), state, return_state=True,
                               name=ctx.op_name(base))
    for k, params in enumerate(layers):
        ctx.bind(finals[k][0].producer, [(p, reshaped(p.value)) for p in params])
    if not batch_first:
        with ctx.naming(f"{base}.out"):
            y = fn.transpose(ctx, y, 0, 1)
    return y, (Stacked([h for h, _ in finals]), Stacked([c for _, c in finals]))


@register_module(nn.MultiheadAttention, grouped=True)
def multihead_attention(ctx, m, *args, **kwargs):
    if not m._qkv_same_embed_dim or m.in_proj_bias is None or m.bias_k is not None \
            or m.add_zero_attn:
        raise Unsupported("MultiheadAttention with kdim/vdim, bias=False, add_bias_kv or "
                          "add_zero_attn")
    if m.dropout and m.training:
        raise Unsupported(f"MultiheadAttention dropout {m.dropout} (attention dropout)")
    if ctx.grouped:   # torch.export: the tensors the module's nodes read from outside
        tensors = [a for a in args if isinstance(a, Tensor)]
        masks = [a for a in args if not isinstance(a, Tensor)]
        if len(tensors) != 1 or len(masks) > 1:
            raise Unsupported("MultiheadAttention over distinct query, key and value (only "
                              "self-attention)")
        x, mask, is_causal = tensors[0], (masks[0] if masks else None), False
    else:
        names = ("query", "key", "value", "key_padding_mask", "need_weights", "attn_mask",
                 "average_attn_weights", "is_causal")
        given = dict(zip(names, args))
        given.update(kwargs)
        x = given["query"]
        if given.get("key") is not x or given.get("value") is not x:
            raise Unsupported("MultiheadAttention over distinct query, key and value (only "
                              "self-attention)")
        if given.get("key_padding_mask") is not None:
            raise Unsupported("MultiheadAttention with key_padding_mask")
        mask, is_causal = given.get("attn_mask"), given.get("is_causal", False)
    with ctx.naming(f"{ctx.path}.in"):
        x = ctx.tensor(x)
        if not m.batch_first:
            x = fn.transpose(ctx, x, 0, 1)
    causal = fn.causal_mask(mask, x.shape[1]) or (bool(is_causal) and mask is None)
    y = ctx.model.multihead_attention(x, m.num_heads, causal, name=ctx.op_name(ctx.path))
    out_w = Param(f"{ctx.path}.out_proj.weight", m.out_proj.weight, m.out_proj.weight.requires_grad)
    out_b = Param(f"{ctx.path}.out_proj.bias", m.out_proj.bias, m.out_proj.bias.requires_grad)
    in_w, in_b = ctx.module_param(m, "in_proj_weight"), ctx.module_param(m, "in_proj_bias")
    ctx.bind(y.producer, [(in_w, reshaped(in_w.value)), (in_b, reshaped(in_b.value)),
                          (out_w, reshaped(out_w.value)), (out_b, None)])
    if not m.batch_first:
        with ctx.naming(f"{ctx.path}.out"):
            y = fn.transpose(ctx, y, 0, 1)
    return y, None
