"""The conversions converters share: each builds the operator(s) a torch call equals.

See functions.py (which torch calls use them) and docs/importer.md (the mapping).
"""
from __future__ import annotations

import importlib
import math

import torch

from ..tensor import Tensor
from . import extra_ops, folds
from .values import Derived, Param, Stacked, Unsupported
from .weights import same, transposed


def builder_module(name: str):
    """parallel_ops.<name>, imported on first use (e.g. conv2d, pool2d, batchnorm)."""
    try:
        return importlib.import_module(f"parallel_ops.{name}")
    except ImportError as e:
        raise Unsupported(f"parallel_ops.{name} is not available ({e})") from None


def key_prefix(p: Param) -> str:
    return p.key.rsplit(".", 1)[0] if "." in p.key else p.key


def weighted_name(ctx, *params) -> str:
    """Ops with weights are named after the module they are (export: the innermost known
    module of the node), else after the module owning the first weight."""
    if ctx.whole_module:
        return ctx.op_name(ctx.path)
    for p in params:
        if isinstance(p, Param):
            return ctx.op_name(key_prefix(p))
    return ctx.op_name()


def need_param(v, what: str) -> Param:
    if not isinstance(v, Param):
        raise Unsupported(f"{what} must be a parameter of the module, got "
                          f"{type(v).__name__}")
    return v


def scalar_value(v):
    """A Python number for v if it is one (or a one-element constant tensor), else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return v
    if isinstance(v, torch.Tensor) and not isinstance(v, torch.nn.Parameter) and v.numel() == 1 \
            and v.ndim == 0:
        return v.item()
    return None


def axis(d: int, ndim: int) -> int:
    if not -ndim <= d < ndim:
        raise Unsupported(f"axis {d} out of range for {ndim} axes")
    return d % ndim


def reshape(ctx, x: Tensor, shape) -> Tensor:
    x = ctx.tensor(x)
    shape = [int(s) for s in (shape if isinstance(shape, (list, tuple, torch.Size)) else [shape])]
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        shape[shape.index(-1)] = math.prod(x.shape) // max(known, 1)
    shape = tuple(shape)
    if shape == tuple(x.shape) or folds.into_linear(ctx, x, shape):
        return x
    return ctx.model.reshape(x, shape, name=ctx.op_name())


def _flip(p: Param) -> Param:
    return Param(p.key, p.value, p.trainable, not p.transposed)


def transpose(ctx, x: Tensor, d0: int, d1: int) -> Tensor:
    if isinstance(x, Param) and x.value.ndim == 2 and axis(d0, 2) != axis(d1, 2):
        return _flip(x)
    x = ctx.tensor(x)
    d0, d1 = axis(d0, x.ndim), axis(d1, x.ndim)
    if d0 == d1:
        return x
    return ctx.model.transpose(x, d0, d1, name=ctx.op_name())


def permute(ctx, x: Tensor, dims) -> Tensor:
    if isinstance(x, Param) and x.value.ndim == 2:
        return _flip(x) if [axis(d, 2) for d in dims] == [1, 0] else x
    x = ctx.tensor(x)
    dims = [axis(d, x.ndim) for d in dims]
    order = list(range(x.ndim))             # order[k]: the input axis now at position k
    for k in range(x.ndim):
        j = order.index(dims[k])
        if j != k:
            x = transpose(ctx, x, k, j)
            order[k], order[j] = order[j], order[k]
    return x


def scalar_op(ctx, fn: str, x, c) -> Tensor:
    x = ctx.tensor(x)
    op = extra_ops.ScalarOp(ctx.model, x, fn, c, name=ctx.op_name())
    return ctx.register(op).outputs[0]


def _strip(shape) -> tuple[int, ...]:
    shape = tuple(shape)
    k = 0
    while k < len(shape) and shape[k] == 1:
        k += 1
    return shape[k:]


def binary(ctx, kind: str, a, b) -> Tensor:
    """a + b or a * b (kind 'add' / 'multiply') with torch's broadcasting where it maps."""
    fn = "add" if kind == "add" else "mul"
    ca, cb = scalar_value(a), scalar_value(b)
    if cb is not None:
        return a if (kind == "add" and cb == 0 and isinstance(a, Tensor)) else \
            scalar_op(ctx, fn, a, cb)
    if ca is not None:
        return scalar_op(ctx, fn, b, ca)
    a, b = ctx.tensor(a), ctx.tensor(b)
    build = ctx.model.add if kind == "add" else ctx.model.multiply
    if a.shape == b.shape:
        return build(a, b, name=ctx.op_name())
    big, small = (a, b) if len(a.shape) >= len(b.shape) else (b, a)
    try:
        out = tuple(torch.broadcast_shapes(a.shape, b.shape))
    except RuntimeError:
        raise Unsupported(f"shapes {a.shape} and {b.shape} do not broadcast") from None
    core = _strip(small.shape)
    if out == tuple(big.shape) and core and tuple(big.shape[len(big.shape) - len(core):]) == core:
        if core != tuple(small.shape):
            small = reshape(ctx, small, core)
        return build(big, small, name=ctx.op_name())
    if a.dtype != b.dtype:
        raise Unsupported(f"{kind} of '{a.name}' ({a.dtype}) and '{b.name}' ({b.dtype})")
    op = extra_ops.register(ctx.model, _broadcast().BroadcastBinary(ctx.model, kind, a, b,
                                                                     name=ctx.op_name()))
    return op.outputs[0]


def _broadcast():
    return builder_module("broadcast")


def expand(ctx, x, *size, implicit=False) -> Tensor:
    """x.expand(size) (a -1 keeps the axis; a parameter's axes are those it is stored with,
    e.g. ViT's class token (1, 1, D), whose operator drops the leading 1s)."""
    have = tuple(x.view.shape) if isinstance(x, Param) else tuple(ctx.tensor(x).shape)
    x = ctx.tensor(x)
    size = list(size[0] if len(size) == 1 and isinstance(size[0], (list, tuple, torch.Size))
                else size)
    lead = len(size) - len(have)
    if lead < 0 or any(s == -1 for s in size[:lead]):
        raise Unsupported(f"expand of {have} to {tuple(size)}")
    shape = tuple(have[k - lead] if s == -1 else int(s) for k, s in enumerate(size))
    if shape == tuple(x.shape):
        return x
    return ctx.model.expand(x, shape, name=ctx.op_name())


def unary(ctx, fn: str, x) -> Tensor:
    """silu, rsqrt, exp, ... (parallel_ops/unary.py)."""
    x = ctx.tensor(x)
    builder_module("unary")
    return ctx.model.unary(fn, x, name=ctx.op_name())


def add(ctx, a, b, alpha=1) -> Tensor:
    """a + alpha * b (torch.add, Tensor.add, aten.add)."""
    return binary(ctx, "add", a, b if alpha == 1 else binary(ctx, "multiply", b, alpha))


def mul(ctx, a, b) -> Tensor:
    return binary(ctx, "multiply", a, b)


def neg(ctx, x) -> Tensor:
    return scalar_op(ctx, "mul", x, -1)


def sub(ctx, a, b, alpha=1) -> Tensor:
    if alpha != 1:
        b = binary(ctx, "multiply", b, alpha)
    ca, cb = scalar_value(a), scalar_value(b)
    if cb is not None:
        return scalar_op(ctx, "sub", a, cb)
    if ca is not None:
        return scalar_op(ctx, "rsub", b, ca)
    return binary(ctx, "add", a, neg(ctx, b))


def div(ctx, a, b, rounding_mode=None) -> Tensor:
    if rounding_mode is not None:
        raise Unsupported(f"division with rounding_mode={rounding_mode!r}")
    ca, cb = scalar_value(a), scalar_value(b)
    if cb is not None:
        return scalar_op(ctx, "div", a, cb)
    if ca is not None:
        return scalar_op(ctx, "rdiv", b, ca)
    raise Unsupported("division of two tensors (only division by a number is supported)")


def power(ctx, x, e) -> Tensor:
    c = scalar_value(e)
    if c is None or not isinstance(x, Tensor):
        raise Unsupported("pow with a tensor exponent (only x ** number is supported)")
    return scalar_op(ctx, "pow", x, c)


def activation(ctx, kind: str, x, **params) -> Tensor:
    x = ctx.tensor(x)
    return getattr(ctx.model, kind)(x, name=ctx.op_name(), **params)


def relu(ctx, x, inplace=False) -> Tensor:
    return activation(ctx, "relu", x)


def tanh(ctx, x) -> Tensor:
    return activation(ctx, "tanh", x)


def sigmoid(ctx, x) -> Tensor:
    return activation(ctx, "sigmoid", x)


def gelu(ctx, x, approximate="none") -> Tensor:
    return activation(ctx, "gelu", x, approximate=approximate)


def softmax(ctx, x, dim=None, *_, dtype=None, **__) -> Tensor:
    x = ctx.tensor(x)
    if dim is None or axis(dim, x.ndim) != x.ndim - 1:
        raise Unsupported(f"softmax over axis {dim} of {x.shape}: only the last axis is "
                          "supported (transpose it last first)")
    if dtype is not None and dtype != getattr(torch, x.dtype):
        raise Unsupported(f"softmax with dtype={dtype}")
    return ctx.model.softmax(x, name=ctx.op_name())


def dropout(ctx, x, p=0.5, training=True, inplace=False) -> Tensor:
    x = ctx.tensor(x)
    if not training or p == 0:
        return x
    return ctx.model.dropout(x, p, name=ctx.op_name())


def linear(ctx, x, w, b=None, transpose_w=False, name=None) -> Tensor:
    """x W^T + b with W, b parameters of the module; transpose_w: x W + b instead."""
    x = ctx.tensor(x)
    w = need_param(w, "the linear weight")
    if w.value.ndim != 2:
        raise Unsupported(f"linear weight '{w.key}' has shape {tuple(w.value.shape)}")
    flip = transpose_w != w.transposed           # the op's (out, in) is the stored one's .t()
    layout = transposed(w.value) if flip else same(w.value)
    if b is not None:
        b = need_param(b, "the linear bias")
        if b.transposed:
            raise Unsupported(f"a transposed bias '{b.key}'")
    out_features = w.value.shape[1] if flip else w.value.shape[0]
    y = ctx.model.linear(x, out_features, bias=b is not None,
                         name=name or weighted_name(ctx, w))
    ctx.bind(y.producer, [(Param(w.key, w.value, w.trainable), layout), (b, None)])
    return y


def matmul(ctx, a, b) -> Tensor:
    if isinstance(b, Param) and b.value.ndim == 2:
        return linear(ctx, a, b, transpose_w=True)
    a, b = ctx.tensor(a), ctx.tensor(b)
    if a.ndim != b.ndim or a.ndim < 2:
        raise Unsupported(f"matmul of {a.shape} and {b.shape}: operands of equal rank are "
                          "supported")
    if a.ndim == 2:
        y = ctx.model.bmm(reshape(ctx, a, (1, *a.shape)), reshape(ctx, b, (1, *b.shape)),
                          name=ctx.op_name())
        return reshape(ctx, y, y.shape[1:])
    return ctx.model.bmm(a, b, name=ctx.op_name())


def cat(ctx, xs, dim=0) -> Tensor:
    xs = [ctx.tensor(x) for x in xs]
    if len(xs) == 1:
        return xs[0]
    return ctx.model.concat(xs, axis(dim, xs[0].ndim), name=ctx.op_name())


def split(ctx, x, size_or_sizes, dim=0) -> list[Tensor]:
    x = ctx.tensor(x)
    d = axis(dim, x.ndim)
    if isinstance(size_or_sizes, int) and size_or_sizes >= x.shape[d]:
        return [x]
    return ctx.model.split(x, size_or_sizes, d, name=ctx.op_name())


def chunk(ctx, x, chunks, dim=0) -> list[Tensor]:
    x = ctx.tensor(x)
    d = axis(dim, x.ndim)
    size = -(-x.shape[d] // chunks)
    return split(ctx, x, size, d)


def index(ctx, x, idx) -> Tensor:
    """x[idx] for ints, slices with step 1, Ellipsis and None."""
    x = ctx.tensor(x)
    idx = idx if isinstance(idx, tuple) else (idx,)
    if sum(i is Ellipsis for i in idx) > 1:
        raise Unsupported("more than one Ellipsis in an index")
    used = sum(1 for i in idx if i is not None and i is not Ellipsis)
    if used > x.ndim:
        raise Unsupported(f"{used} indices for a {x.ndim}-d tensor")
    if Ellipsis in idx:
        k = idx.index(Ellipsis)
        idx = idx[:k] + (slice(None),) * (x.ndim - used) + idx[k + 1:]
    else:
        idx = idx + (slice(None),) * (x.ndim - used)
    out_shape, ranges, k = [], [], 0
    for i in idx:
        if i is None:
            out_shape.append(1)
            continue
        n = x.shape[k]
        if isinstance(i, bool) or not isinstance(i, (int, slice)):
            raise Unsupported(f"indexing with {type(i).__name__} (ints and slices only)")
        if isinstance(i, int):
            j = i + n if i < 0 else i
            if not 0 <= j < n:
                raise Unsupported(f"index {i} out of range for size {n}")
            ranges.append((k, j, j + 1))
        else:
            lo, hi, step = i.indices(n)
            if step != 1:
                raise Unsupported(f"slice step {step} (only step 1)")
            if hi <= lo:
                raise Unsupported("an empty slice")
            ranges.append((k, lo, hi))
            out_shape.append(hi - lo)
        k += 1
    cur = x
    for ax, lo, hi in ranges:
        n = cur.shape[ax]
        if (lo, hi) == (0, n):
            continue
        sizes = [s for s in (lo, hi - lo, n - hi) if s > 0]
        parts = ctx.model.split(cur, sizes, ax, name=ctx.op_name())
        cur = parts[1 if lo > 0 else 0]
    return reshape(ctx, cur, out_shape)


def getitem(ctx, obj, idx):
    if isinstance(obj, Tensor):
        return index(ctx, obj, idx)
    if isinstance(obj, Stacked):
        if isinstance(idx, int):
            return obj.items[idx]
        return index(ctx, ctx.stack(obj), idx)
    if isinstance(obj, Param):
        return index(ctx, ctx.tensor(obj), idx)
    return obj[idx]


def flatten(ctx, x, start_dim=0, end_dim=-1) -> Tensor:
    x = ctx.tensor(x)
    s, e = axis(start_dim, x.ndim), axis(end_dim, x.ndim)
    if s == 1 and e == x.ndim - 1 and x.ndim > 2:
        return ctx.model.flat(x, name=ctx.op_name())
    shape = x.shape[:s] + (math.prod(x.shape[s:e + 1]),) + x.shape[e + 1:]
    return reshape(ctx, x, shape)


def unsqueeze(ctx, x, dim) -> Tensor:
    x = ctx.tensor(x)
    d = dim if dim >= 0 else dim + x.ndim + 1
    return reshape(ctx, x, x.shape[:d] + (1,) + x.shape[d:])


def squeeze(ctx, x, dim=None) -> Tensor:
    x = ctx.tensor(x)
    dims = range(x.ndim) if dim is None else [axis(d, x.ndim) for d in (
        dim if isinstance(dim, (list, tuple)) else [dim])]
    shape = [s for k, s in enumerate(x.shape) if not (k in dims and s == 1)]
    return reshape(ctx, x, shape)


def unflatten(ctx, x, dim, sizes) -> Tensor:
    x = ctx.tensor(x)
    d = axis(dim, x.ndim)
    sizes = list(sizes)
    if -1 in sizes:
        sizes[sizes.index(-1)] = x.shape[d] // -math.prod(sizes)
    return reshape(ctx, x, x.shape[:d] + tuple(sizes) + x.shape[d + 1:])


def identity(ctx, x, *args, **kwargs):
    return x


def to(ctx, x, *args, **kwargs):
    x = ctx.tensor(x)
    dtype = kwargs.get("dtype")
    for a in args:
        if isinstance(a, torch.dtype):
            dtype = a
    if dtype is None or dtype == getattr(torch, x.dtype):
        return x
    if not dtype.is_floating_point or not x.dtype.startswith("float"):
        raise Unsupported(f"a dtype conversion of '{x.name}' ({x.dtype}) to {dtype} (only "
                          "between floating dtypes, and of integer inputs to masks)")
    return ctx.model.cast(x, str(dtype).replace("torch.", ""), name=ctx.op_name())


def mean(ctx, x, dim=None, keepdim=False, dtype=None) -> Tensor:
    x = ctx.tensor(x)
    dims = sorted(axis(d, x.ndim) for d in (dim if isinstance(dim, (list, tuple)) else [dim])) \
        if dim is not None else None
    if x.ndim == 4 and dims == [2, 3]:
        y = adaptive_avg_pool2d(ctx, x, 1)
        return y if keepdim else reshape(ctx, y, y.shape[:2])
    raise Unsupported(f"mean over {dim} of {x.shape}: only the (H, W) axes of an NCHW "
                      "tensor are supported (as adaptive average pooling)")


def adaptive_avg_pool2d(ctx, x, output_size) -> Tensor:
    x = ctx.tensor(x)
    builder_module("pool2d")
    return ctx.model.adaptive_avg_pool2d(x, output_size, name=ctx.op_name())


def max_pool2d(ctx, x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False) -> Tensor:
    x = ctx.tensor(x)
    if _pair(dilation) != (1, 1) or ceil_mode or return_indices:
        raise Unsupported(f"max_pool2d with dilation={dilation}, ceil_mode={ceil_mode}, "
                          f"return_indices={return_indices}")
    builder_module("pool2d")
    return ctx.model.max_pool2d(x, kernel_size, stride or None, padding, name=ctx.op_name())


def avg_pool2d(ctx, x, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None) -> Tensor:
    x = ctx.tensor(x)
    if ceil_mode or divisor_override is not None:
        raise Unsupported(f"avg_pool2d with ceil_mode={ceil_mode}, "
                          f"divisor_override={divisor_override}")
    builder_module("pool2d")
    return ctx.model.avg_pool2d(x, kernel_size, stride or None, padding, count_include_pad,
                                name=ctx.op_name())


def _pair(v):
    if isinstance(v, (list, tuple)):
        return tuple(v) if len(v) == 2 else (v[0], v[0])
    return (v, v)


def conv2d(ctx, x, w, b=None, stride=1, padding=0, dilation=1, groups=1, name=None) -> Tensor:
    x = ctx.tensor(x)
    w = need_param(w, "the conv2d weight")
    if b is not None:
        b = need_param(b, "the conv2d bias")
    out_ch, _, kh, kw = w.value.shape
    if isinstance(padding, str):
        padding = _padding_str(padding, (kh, kw), _pair(dilation), _pair(stride))
    builder_module("conv2d")
    y = ctx.model.conv2d(x, out_ch, (kh, kw), _pair(stride), _pair(padding), _pair(dilation),
                         groups, b is not None, name=name or weighted_name(ctx, w))
    ctx.bind(y.producer, [(w, None), (b, None)])
    return y


def _padding_str(padding: str, k, d, s):
    if padding == "valid":
        return (0, 0)
    if padding == "same" and s == (1, 1):
        total = [dd * (kk - 1) for kk, dd in zip(k, d)]
        if all(t % 2 == 0 for t in total):
            return tuple(t // 2 for t in total)
    raise Unsupported(f"conv2d padding='{padding}' with kernel {k}, dilation {d}, stride "
                      f"{s} (asymmetric padding)")


def batch_norm(ctx, x, rm, rv, w=None, b=None, training=True, momentum=0.1, eps=1e-5,
               name=None) -> Tensor:
    x = ctx.tensor(x)
    rm, rv = need_param(rm, "running_mean"), need_param(rv, "running_var")
    if x.ndim != 4:
        raise Unsupported(f"batch norm of a {x.ndim}-d tensor (only NCHW)")
    builder_module("batchnorm")
    y = ctx.model.batchnorm2d(x, eps, momentum, w is not None, name=name or
                              weighted_name(ctx, rm))
    ctx.bind(y.producer, ([(need_param(w, "weight"), None), (need_param(b, "bias"), None)]
                          if w is not None else []) + [(rm, None), (rv, None)])
    return y


def layer_norm(ctx, x, normalized_shape, w=None, b=None, eps=1e-5, name=None) -> Tensor:
    x = ctx.tensor(x)
    shape = tuple(normalized_shape) if isinstance(normalized_shape, (list, tuple)) \
        else (normalized_shape,)
    if shape != x.shape[-1:]:
        raise Unsupported(f"layer norm over {shape} of {x.shape}: only the last axis")
    if (w is None) != (b is None):
        raise Unsupported("layer norm with a weight but no bias (or the reverse)")
    y = ctx.model.layernorm(x, shape[0], eps, w is not None,
                            name=name or weighted_name(ctx, w))
    if w is not None:
        ctx.bind(y.producer, [(need_param(w, "weight"), None), (need_param(b, "bias"), None)])
    return y


def embedding(ctx, idx, w, padding_idx=None, name=None) -> Tensor:
    w = need_param(w, "the embedding table")
    idx = ctx.tensor(idx, "indices")
    num, dim = w.value.shape
    y = ctx.model.embedding(idx, num, dim, name=name or weighted_name(ctx, w),
                            padding_idx=padding_idx)
    ctx.bind(y.producer, [(w, None)])
    return y


def cross_entropy(ctx, logits, target, weight=None, size_average=None, ignore_index=-100,
                  reduce=None, reduction="mean", label_smoothing=0.0, name=None) -> Tensor:
    logits, target = ctx.tensor(logits), ctx.tensor(target, "labels")
    if weight is not None or reduction != "mean" or label_smoothing or size_average is not None \
            or reduce is not None:
        raise Unsupported("cross_entropy with class weights, label smoothing or a reduction "
                          "other than 'mean'")
    if logits.ndim != 2:
        raise Unsupported(f"cross_entropy of logits {logits.shape}: torch's class axis is 1; "
                          "flatten to (N, C) first (logits.view(-1, C))")
    return ctx.model.softmax_cross_entropy(logits, target, name=name or ctx.op_name(),
                                           ignore_index=ignore_index)


def causal_mask(mask, s: int, bool_allows: bool = False):
    """True for a causal mask (later keys masked), False for none; else Unsupported.
    A boolean mask marks masked positions (nn.MultiheadAttention) or, with bool_allows,
    allowed ones (F.scaled_dot_product_attention); a float mask is added (0 or -inf). Any
    leading axes must repeat the same (s, s) pattern."""
    if mask is None:
        return False
    if isinstance(mask, Param):
        mask = mask.value
    if not isinstance(mask, torch.Tensor) or mask.ndim < 2 or tuple(mask.shape[-2:]) != (s, s):
        raise Unsupported(f"attention mask {getattr(mask, 'shape', mask)}: only a constant "
                          f"({s}, {s}) causal mask is supported")
    m = mask.detach().cpu().reshape(-1, s, s)
    if m.dtype == torch.bool:
        blocked = ~m if bool_allows else m
    else:
        if not torch.all((m == 0) | torch.isneginf(m)):
            raise Unsupported("an additive attention mask with values other than 0 and -inf")
        blocked = torch.isneginf(m)
    upper = torch.ones(s, s, dtype=torch.bool).triu(1).expand_as(blocked)
    if torch.equal(blocked, upper):
        return True
    if not blocked.any():
        return False
    raise Unsupported("an attention mask that is not causal")


def sdpa(ctx, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
         enable_gqa=False) -> Tensor:
    """A constant mask must be causal (or nothing); a mask computed from the inputs
    (HF's from attention_mask) becomes an operand."""
    q, k, v = ctx.tensor(q), ctx.tensor(k), ctx.tensor(v)
    if enable_gqa:
        raise Unsupported("scaled_dot_product_attention(enable_gqa=True): repeat the key "
                          "and value heads (expand) first")
    mask = None
    if isinstance(attn_mask, (Tensor, Derived)):
        mask = ctx.tensor(attn_mask)
        if is_causal:
            raise Unsupported("an attention mask and is_causal=True together")
        causal = False
    else:
        causal = bool(is_causal) or causal_mask(attn_mask, q.shape[2], bool_allows=True)
    op = extra_ops.SDPA(ctx.model, q, k, v, causal, scale, name=ctx.op_name(), mask=mask,
                        dropout_p=dropout_p)
    return ctx.register(op).outputs[0]
