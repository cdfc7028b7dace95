"""MetaMemo: what an aten operator returns on meta tensors, remembered per input signature.

Counting a task's work (work.py) runs its code on meta tensors, where torch computes only
output shapes, strides and dtypes. For most pointwise operators that meta computation is
torch's Python reference code (~0.5 ms per multiply), and a search counts thousands of new
part shapes, most of whose operators were already run with the same input signatures
(measured on Inception-v3 on 16 GPUs: 62% of the operators dispatched while counting
repeat one seen before, e.g. the paired forward a backward node runs first). A meta kernel
is a pure function of its inputs' shapes, strides, dtypes and its other arguments, so the
outputs' metadata can be remembered and handed out again as fresh meta tensors.

Only operators whose results are new tensors are remembered: not views, nothing that
mutates or aliases an argument (their outputs share an input's storage, which a fresh
tensor would not), nothing that returns a non-tensor; all tensor arguments on meta. The
mode sits below the counters (work._count enters it first), so they see every operator
and its outputs exactly as without it: counts are unchanged
(tests/strategy/test_meta_counting.py checks that on three apps' tasks under random
strategies). The table is emptied when it reaches MAX_ENTRIES (a long search's memory).

Pointwise operators are also remembered across shapes (`_pointwise`): a search's new part
shapes are mostly new signatures, but what a pointwise operator returns is a function of
its inputs' dtypes (and which are 0-d) and its other arguments, plus the broadcast shape:
when every tensor argument has the standard contiguous strides of its shape and no size is
0, torch's output is a fresh tensor of the broadcast shape with its standard strides.
(TensorIterator, and the Python references' compute_elementwise_output_strides, order
the output's dimensions by the inputs' strides broadcast to that shape: those are 0 or
non-increasing from the outermost dimension, and equal ones tie only over size-1
dimensions, whose tie-break keeps the order; so the order stays the natural one.) The
dtype is remembered per such signature, from a first real run whose output is checked to
be of that form, and later shapes get `torch.empty(shape, dtype)` without running
torch's meta code. An in-place pointwise operator returns its own first argument: it is
remembered the same way (for arguments that broadcast to that argument's shape).
tests/strategy/test_meta_pointwise.py compares both with running torch's meta code over
random shapes of every pointwise operator the apps run.
"""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from parallel_ops.workshape import contiguous_strides


class _Mode(TorchDispatchMode):
    """A dispatch mode that opts out of torch wrapping its __torch_dispatch__ in
    torch._disable_dynamo (our modes never run under torch.compile, so there is nothing to
    disable): the wrapper costs a frame-evaluation switch per dispatched operator, 9% of
    counting a task. (torch._dynamo is still imported once per process, by the Python
    reference kernels some operators use on meta tensors.)"""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False


_MISSING = object()
_UNCACHEABLE = object()
MAX_ENTRIES = 200_000


def _cacheable(func) -> bool:
    schema = func._schema
    if schema.is_mutable or func.is_view:
        return False
    return all(r.alias_info is None for r in schema.returns) and all(
        r.type.isSubtypeOf(torch._C.OptionalType.ofTensor()) or
        r.type.isSubtypeOf(torch._C.ListType.ofTensors()) for r in schema.returns)


# Kinds of operator (MetaMemo._CACHEABLE): not remembered (0), remembered per signature,
# also per shape-free signature (pointwise), an in-place pointwise one (returns its self).
_FUNCTIONAL, _POINTWISE, _INPLACE = 1, 2, 3


def _kind(func) -> int:
    pointwise = torch.Tag.pointwise in func.tags and len(func._schema.returns) == 1
    if not _cacheable(func):
        return _INPLACE if pointwise and _in_place(func._schema) else 0
    return _POINTWISE if pointwise else _FUNCTIONAL


def _in_place(schema) -> bool:
    """Whether the operator writes its first argument only and returns it."""
    written = [a.alias_info is not None and a.alias_info.is_write for a in schema.arguments]
    ret = schema.returns[0].alias_info
    return bool(written) and written[0] and not any(written[1:]) and ret is not None \
        and ret.is_write


def _key(x):
    """A hashable signature of an argument: tensors by (shape, stride, offset, dtype),
    containers by their items, other values by (type, value) so that True and 1 stay apart.
    TypeError for a tensor not on meta or an unhashable value (not remembered)."""
    t = type(x)
    if t is tuple or t is list:     # (the commonest cases first: the arguments)
        return (t, tuple([_key(y) for y in x]))
    if isinstance(x, torch.Tensor):
        if x.device.type != "meta":
            raise TypeError
        return (tuple(x.shape), x.stride(), x.storage_offset(), x.dtype)
    if isinstance(x, (list, tuple)):
        return (t, tuple([_key(y) for y in x]))
    if isinstance(x, dict):
        return tuple(sorted((k, _key(v)) for k, v in x.items()))
    hash(x)
    return (type(x), x)


def _pointwise(args, kwargs) -> tuple | None:
    """(shape-free signature, broadcast shape) of a pointwise operator's arguments when its
    output's form is known from its dtype alone (module doc), else None. Tensors count by
    (dtype, 0-d or not); other values as in _key (TypeError if unhashable)."""
    shapes = []
    sig = []
    for a in args:
        if isinstance(a, torch.Tensor):
            shape = a.shape
            if a.device.type != "meta" or type(a) is not torch.Tensor or \
                    not a.is_contiguous() or \
                    (1 in shape and a.stride() != contiguous_strides(shape)):
                return None         # (is_contiguous() does not check size-1 strides)
            shapes.append(shape)
            sig.append((_TENSOR, a.dtype, a.dim() == 0))
        elif isinstance(a, (list, tuple)):
            return None
        else:
            hash(a)
            sig.append((type(a), a))
    if kwargs:
        for v in kwargs.values():
            if isinstance(v, (torch.Tensor, list, tuple)):
                return None
        sig.append(_key(kwargs))
    if not shapes:
        return None
    out = _broadcast(shapes)
    if out is None:
        return None
    return tuple(sig), out


_TENSOR = object()


def _broadcast(shapes) -> tuple | None:
    """The broadcast of `shapes` if they broadcast and no size is 0, else None.
    (torch.broadcast_shapes gives the same shape but costs ~40 us a call here against ~2:
    this runs once per pointwise operator counted.)"""
    nd = max(map(len, shapes))
    out = [1] * nd
    for s in shapes:
        off = nd - len(s)
        for i, d in enumerate(s):
            if d == 0:
                return None
            o = out[off + i]
            if o == 1:
                out[off + i] = d
            elif d != 1 and d != o:
                return None
    if 0 in out:
        return None
    return tuple(out)


def _template(out):
    """The outputs' metadata, or _UNCACHEABLE when they are not fresh tensors."""
    if isinstance(out, torch.Tensor):
        if out.storage_offset() != 0 or type(out) is not torch.Tensor:
            return _UNCACHEABLE
        return (tuple(out.shape), out.stride(), out.dtype)
    if isinstance(out, (list, tuple)):
        items = tuple(_template(o) for o in out)
        if any(t is _UNCACHEABLE for t in items):
            return _UNCACHEABLE
        return (type(out), items)
    if out is None:
        return None
    return _UNCACHEABLE


def _rebuild(t):
    if t is None:
        return None
    if isinstance(t[0], type):
        kind, items = t
        return kind(_rebuild(i) for i in items)
    shape, stride, dtype = t
    return torch.empty_strided(shape, stride, dtype=dtype, device="meta")


class MetaMemo(_Mode):
    """Dispatch mode remembering meta outputs per (operator, argument signature), and for
    pointwise operators their dtype per shape-free signature (module doc). One table per
    process: `TABLE` and `DTYPES` are shared by every count."""

    TABLE: dict = {}
    DTYPES: dict = {}           # (operator, shape-free signature) -> dtype, or _UNCACHEABLE
    _CACHEABLE: dict = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kind = self._CACHEABLE.get(func)
        if kind is None:
            kind = self._CACHEABLE[func] = _kind(func)
        if not kind:
            return func(*args, **kwargs)
        general = None
        if kind == _INPLACE:
            return self._in_place(func, args, kwargs)
        if kind == _POINTWISE:
            try:
                general = _pointwise(args, kwargs)
            except TypeError:           # an unhashable argument
                return func(*args, **kwargs)
            if general is not None:
                gkey = (func, general[0])
                dtype = self.DTYPES.get(gkey)
                if dtype is not None and dtype is not _UNCACHEABLE:
                    return torch.empty(general[1], dtype=dtype, device="meta")
        try:
            key = (func, _key(args), _key(kwargs))
        except TypeError:           # a tensor not on meta, or an unhashable argument
            return func(*args, **kwargs)
        got = self.TABLE.get(key, _MISSING)
        if got is _MISSING:
            out = func(*args, **kwargs)
            if len(self.TABLE) >= MAX_ENTRIES:
                self.TABLE.clear()
                self.DTYPES.clear()
            self.TABLE[key] = _template(out)
            if general is not None:
                self.DTYPES[gkey] = out.dtype if type(out) is torch.Tensor and \
                    tuple(out.shape) == general[1] and out.storage_offset() == 0 and \
                    out.stride() == contiguous_strides(general[1]) else _UNCACHEABLE
            return out
        if got is _UNCACHEABLE:
            return func(*args, **kwargs)
        return _rebuild(got)

    def _in_place(self, func, args, kwargs):
        """An in-place pointwise operator on meta tensors checks that its arguments
        broadcast to its self's shape and that the result's dtype casts to self's (which
        depends on the dtypes alone), and returns self: remembered per shape-free
        signature as for _pointwise, for self's own shape."""
        try:
            general = _pointwise(args, kwargs)
        except TypeError:           # an unhashable argument
            general = None
        if general is None or general[1] != tuple(args[0].shape):
            return func(*args, **kwargs)
        gkey = (func, general[0])
        if self.DTYPES.get(gkey) is _SELF:
            return args[0]
        out = func(*args, **kwargs)
        if len(self.DTYPES) >= MAX_ENTRIES:
            self.DTYPES.clear()
        self.DTYPES.setdefault(gkey, _SELF if out is args[0] else _UNCACHEABLE)
        return out


_SELF = object()           # MetaMemo.DTYPES: an in-place operator that returns its self
