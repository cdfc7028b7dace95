"""Converters for functions, Tensor methods (torch.fx) and ATen operators (torch.export),
built from the conversions in convert.py. Each maps a torch call to the operator it equals:

  + - * / neg pow       elementwise add / multiply (same shape, or a broadcast operand whose
                        shape, without leading 1s, is the other's trailing axes), or a
                        scalar_<fn> op for a Python number; a - b is a + (-b)
  linear, addmm, mm, @  linear (a parameter operand: the weight; addmm/mm/@ use its
                        transpose, as HF's Conv1D does)
  matmul, bmm           bmm (activation operands of equal rank)
  view reshape flatten unflatten squeeze unsqueeze   reshape / flat
  transpose permute t   transpose (a permutation is a product of swaps)
  cat, split, chunk     concat, split
  x[...], select, slice split (+ reshape to drop indexed axes)
  relu gelu tanh sigmoid softmax dropout layer_norm embedding cross_entropy
  scaled_dot_product_attention (sdpa, no mask or causal), max/avg/adaptive pooling, mean
  over (H, W) (adaptive average pooling to 1), lstm (ATen), batch_norm, conv2d
  contiguous clone alias to(same dtype)   nothing (the same tensor)
"""
from __future__ import annotations

import operator

import torch
import torch.nn.functional as F

from .convert import (adaptive_avg_pool2d, add, avg_pool2d, axis, batch_norm, cat,
                      chunk, conv2d, cross_entropy, div, dropout, embedding, expand, flatten,
                      gelu, unary,
                      getitem, identity, index, key_prefix, layer_norm, linear, matmul,
                      max_pool2d, mean, mul, need_param, neg, permute, power, relu, reshape,
                      sdpa, sigmoid, softmax, split, squeeze, sub, tanh, to, transpose,
                      unflatten, unsqueeze)
from ..tensor import Tensor
from .registry import register_aten, register_function, register_method
from .values import Param, Stacked, Unsupported


# -- python / torch functions (torch.fx) -----------------------------------------------------
register_function(operator.add, operator.iadd, torch.add)(add)
register_function(operator.mul, operator.imul, torch.mul)(mul)
register_function(operator.sub, operator.isub, torch.sub)(sub)
register_function(operator.truediv, operator.itruediv, torch.div)(div)
register_function(operator.neg, torch.neg)(neg)
register_function(operator.pow, torch.pow)(power)
register_function(operator.matmul, torch.matmul, torch.bmm)(matmul)
register_function(operator.getitem)(getitem)
register_function(getattr)(lambda ctx, obj, name, *default: _attribute(obj, name, *default))
register_function(torch.cat, torch.concat)(
    lambda ctx, xs, dim=0, axis=None: cat(ctx, xs, dim if axis is None else axis))
register_function(torch.flatten)(flatten)
register_function(torch.reshape)(reshape)
register_function(torch.transpose)(transpose)
register_function(torch.permute)(permute)
register_function(torch.unsqueeze)(unsqueeze)
register_function(torch.squeeze)(squeeze)
register_function(torch.split)(split)
register_function(torch.chunk)(chunk)
register_function(torch.relu, F.relu)(relu)
register_function(torch.tanh, F.tanh)(tanh)
register_function(torch.sigmoid, F.sigmoid)(sigmoid)
register_function(F.gelu)(gelu)
register_function(torch.softmax, F.softmax)(
    lambda ctx, x, dim=None, _stacklevel=3, dtype=None: softmax(ctx, x, dim, dtype=dtype))
register_function(F.dropout)(dropout)
register_function(F.linear)(lambda ctx, x, weight, bias=None: linear(ctx, x, weight, bias))
register_function(F.layer_norm)(
    lambda ctx, x, normalized_shape, weight=None, bias=None, eps=1e-5:
    layer_norm(ctx, x, normalized_shape, weight, bias, eps))
register_function(F.embedding)(
    lambda ctx, x, weight, padding_idx=None, max_norm=None, norm_type=2.0,
    scale_grad_by_freq=False, sparse=False: _embedding_f(ctx, x, weight, padding_idx,
                                                         max_norm, scale_grad_by_freq, sparse))
register_function(F.cross_entropy)(cross_entropy)
register_function(F.adaptive_avg_pool2d)(adaptive_avg_pool2d)
register_function(F.max_pool2d)(max_pool2d)
register_function(F.avg_pool2d)(avg_pool2d)
register_function(torch.mean)(mean)
register_function(F.scaled_dot_product_attention)(sdpa)
register_function(F.conv2d)(conv2d)


def _embedding_f(ctx, x, weight, padding_idx, max_norm, scale_grad_by_freq, sparse):
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise Unsupported("embedding with max_norm, scale_grad_by_freq or sparse")
    return embedding(ctx, x, weight, padding_idx)


# -- Tensor methods ---------------------------------------------------------------------------
register_method("add", "__add__", "__iadd__")(add)
register_method("mul", "mul_", "__mul__")(mul)
register_method("sub", "sub_")(sub)
register_method("div", "div_")(div)
register_method("neg")(neg)
register_method("pow")(power)
register_method("matmul", "bmm")(matmul)
register_method("view", "reshape")(
    lambda ctx, x, *shape: reshape(ctx, x, shape[0] if len(shape) == 1 and
                                   isinstance(shape[0], (list, tuple, torch.Size)) else shape))
register_method("flatten")(flatten)
register_method("transpose")(transpose)
register_method("permute")(
    lambda ctx, x, *dims: permute(ctx, x, dims[0] if len(dims) == 1 and
                                  isinstance(dims[0], (list, tuple)) else dims))
register_method("t")(lambda ctx, x: transpose(ctx, x, 0, 1))
register_method("unsqueeze")(unsqueeze)
register_method("squeeze")(squeeze)
register_method("split")(split)
register_method("chunk")(chunk)
register_method("contiguous", "clone")(identity)
register_method("to", "type_as")(to)
register_method("float")(lambda ctx, x: to(ctx, x, torch.float32))
register_method("double")(lambda ctx, x: to(ctx, x, torch.float64))
register_method("relu", "relu_")(relu)
register_method("tanh")(tanh)
register_method("sigmoid")(sigmoid)
register_method("softmax")(lambda ctx, x, dim=None, dtype=None: softmax(ctx, x, dim,
                                                                        dtype=dtype))
register_method("mean")(mean)


# -- ATen operators (torch.export) ------------------------------------------------------------
register_aten("linear")(lambda ctx, x, w, b=None: linear(ctx, x, w, b))
register_aten("addmm")(
    lambda ctx, bias, x, w, beta=1, alpha=1: _addmm(ctx, bias, x, w, beta, alpha))
register_aten("mm")(lambda ctx, x, w: matmul(ctx, x, w))
register_aten("matmul", "bmm")(matmul)
register_aten("conv2d")(conv2d)
register_aten("batch_norm")(
    lambda ctx, x, w, b, rm, rv, training, momentum, eps, cudnn=True:
    batch_norm(ctx, x, rm, rv, w, b, training, momentum, eps))
register_aten("layer_norm")(
    lambda ctx, x, shape, w=None, b=None, eps=1e-5, cudnn=True: layer_norm(ctx, x, shape, w,
                                                                           b, eps))
register_aten("embedding")(
    lambda ctx, w, idx, padding_idx=-1, scale_grad_by_freq=False, sparse=False:
    embedding(ctx, idx, w, padding_idx if padding_idx >= 0 else None))
register_aten("relu", "relu_")(relu)
register_aten("gelu")(gelu)
register_aten("tanh")(tanh)
register_aten("sigmoid")(sigmoid)
register_aten("add")(add)
register_aten("sub")(sub)
register_aten("rsub")(lambda ctx, a, b, alpha=1: sub(ctx, b, a, alpha))
register_aten("mul")(mul)
register_aten("div")(div)
register_aten("neg")(neg)
register_aten("pow")(power)
register_aten("view", "reshape", "_unsafe_view")(reshape)
register_aten("flatten")(flatten)
register_aten("unflatten")(unflatten)
register_aten("permute")(permute)
register_aten("transpose")(transpose)
register_aten("t")(lambda ctx, x: transpose(ctx, x, 0, 1))
register_aten("unsqueeze")(unsqueeze)
register_aten("squeeze")(squeeze)
register_aten("contiguous", "clone", "alias", "lift_fresh_copy")(identity)
register_aten("_to_copy", "to")(to)
register_aten("cat", "concat")(cat)
register_aten("split", "split_with_sizes")(split)
register_aten("chunk")(chunk)
register_aten("select")(lambda ctx, x, dim, i: x.items[i] if isinstance(x, Stacked) and dim == 0
                        else index(ctx, x, (slice(None),) * axis(dim, ctx.tensor(x).ndim) + (i,)))
register_aten("slice")(lambda ctx, x, dim=0, start=None, end=None, step=1: index(
    ctx, x, (slice(None),) * axis(dim, ctx.tensor(x).ndim) + (slice(start, end, step),)))
register_aten("softmax", "_softmax")(
    lambda ctx, x, dim, half_to_float=None: softmax(ctx, x, dim))
register_aten("dropout")(lambda ctx, x, p, train: dropout(ctx, x, p, train))
register_aten("max_pool2d")(max_pool2d)
register_aten("avg_pool2d")(avg_pool2d)
register_aten("adaptive_avg_pool2d")(adaptive_avg_pool2d)
register_aten("mean")(mean)
register_aten("scaled_dot_product_attention")(sdpa)
register_aten("cross_entropy_loss")(
    lambda ctx, x, t, weight=None, reduction=1, ignore_index=-100, label_smoothing=0.0:
    cross_entropy(ctx, x, t, weight, reduction={0: "none", 1: "mean", 2: "sum"}[reduction],
                  ignore_index=ignore_index, label_smoothing=label_smoothing))
register_aten("_assert_tensor_metadata")(lambda ctx, *args, **kwargs: None)
register_aten("add_")(lambda ctx, a, b, alpha=1: _add_inplace(ctx, a, b, alpha))
register_method("add_")(lambda ctx, a, b, alpha=1: _add_inplace(ctx, a, b, alpha))
register_aten("lstm")(
    lambda ctx, x, hx, params, has_biases, num_layers, dropout_p, train, bidirectional,
    batch_first: _lstm_aten(ctx, x, hx, params, has_biases, num_layers, dropout_p, train,
                            bidirectional, batch_first))


def _attribute(obj, name, *default):
    """A field of a tuple-like result (`torch.max(x, 1).values`); shape queries of tensors
    are answered before converters (walk.py)."""
    if isinstance(obj, (Tensor, Param)):
        raise Unsupported(f"attribute '{name}' of a tensor")
    return getattr(obj, name, *default)


def _addmm(ctx, bias, x, w, beta, alpha):
    if beta != 1 or alpha != 1:
        raise Unsupported(f"addmm with beta={beta}, alpha={alpha}")
    return linear(ctx, x, w, bias, transpose_w=True)


def _add_inplace(ctx, a, b, alpha=1):
    if isinstance(a, Param) and a.key.endswith("num_batches_tracked"):
        ctx.count_steps(a.key, a.value)
        return None
    if isinstance(a, Param):
        raise Unsupported(f"an in-place update of buffer '{a.key}'")
    return add(ctx, a, b, alpha)            # x += y on an activation: its new value


def _lstm_aten(ctx, x, hx, params, has_biases, num_layers, dropout_p, train, bidirectional,
               batch_first):
    from .modules import lstm_layers
    if not has_biases or bidirectional or (dropout_p and train and num_layers > 1):
        raise Unsupported("LSTM without biases, bidirectional, or with dropout between layers")
    per = 4
    if len(params) != per * num_layers:
        raise Unsupported(f"LSTM with {len(params)} parameter tensors for {num_layers} layers "
                          "(projections are not supported)")
    layers = [params[per * k:per * (k + 1)] for k in range(num_layers)]
    hidden = need_param(layers[0][1], "weight_hh").value.shape[1]
    base = key_prefix(need_param(layers[0][0], "weight_ih"))
    y, (h, c) = lstm_layers(ctx, x, hx, layers, hidden, batch_first, base)
    return y, h, c



# -- broadcasting, expand and pointwise functions (parallel_ops/broadcast.py, unary.py) -----
register_aten("expand")(expand)
register_method("expand")(expand)
register_aten("expand_as")(lambda ctx, x, other: expand(ctx, x, ctx.tensor(other).shape))
for _fn in ("silu", "rsqrt", "sqrt", "exp", "log", "cos", "sin", "abs", "square"):
    register_aten(_fn)(lambda ctx, x, _fn=_fn: unary(ctx, _fn, x))
    register_method(_fn)(lambda ctx, x, _fn=_fn: unary(ctx, _fn, x))
    if hasattr(torch, _fn):
        register_function(getattr(torch, _fn))(lambda ctx, x, _fn=_fn: unary(ctx, _fn, x))
register_function(F.silu)(lambda ctx, x, inplace=False: unary(ctx, "silu", x))
register_aten("silu_")(lambda ctx, x: unary(ctx, "silu", x))
