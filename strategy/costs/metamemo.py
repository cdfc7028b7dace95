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
"""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode


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


def _key(x):
    """A hashable signature of an argument: tensors by (shape, stride, offset, dtype),
    containers by their items, other values by (type, value) so that True and 1 stay apart.
    TypeError for a tensor not on meta or an unhashable value (not remembered)."""
    if isinstance(x, torch.Tensor):
        if x.device.type != "meta":
            raise TypeError
        return (tuple(x.shape), x.stride(), x.storage_offset(), x.dtype)
    if isinstance(x, (list, tuple)):
        return (type(x), tuple(_key(y) for y in x))
    if isinstance(x, dict):
        return tuple(sorted((k, _key(v)) for k, v in x.items()))
    hash(x)
    return (type(x), x)


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
    """Dispatch mode remembering meta outputs per (operator, argument signature) (module
    doc). One table per process: `TABLE` is shared by every count."""

    TABLE: dict = {}
    _CACHEABLE: dict = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        ok = self._CACHEABLE.get(func)
        if ok is None:
            ok = self._CACHEABLE[func] = _cacheable(func)
        if not ok:
            return func(*args, **kwargs)
        try:
            key = (func, _key(args), _key(kwargs))
        except TypeError:           # a tensor not on meta, or an unhashable argument
            return func(*args, **kwargs)
        got = self.TABLE.get(key, _MISSING)
        if got is _MISSING:
            out = func(*args, **kwargs)
            if len(self.TABLE) >= MAX_ENTRIES:
                self.TABLE.clear()
            self.TABLE[key] = _template(out)
            return out
        if got is _UNCACHEABLE:
            return func(*args, **kwargs)
        return _rebuild(got)
