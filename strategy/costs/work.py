"""The work of a task node, independent of any device: FLOPs, bytes and kernels.

Built-in operators declare it (formulas.py: Op.work per part and phase); what follows is
counting, for a part without a declaration and as the declarations' oracle (equal by
test: tests/strategy/test_work_formulas.py).

FLOPs come from torch's FLOP formulas (torch.utils.flop_counter.flop_registry, counted as
its FlopCounterMode counts them, by Counter below, which does not import torch._dynamo:
that import alone costs seconds) around the node's own executor step (parts.node_steps) on
meta tensors, which compute nothing and allocate nothing: a forward node counts its
forward; a backward node runs its paired forward outside the counter and counts only the
backward. An operator that needs real values (a data-dependent check such as `bool(t)`)
is counted again on real CPU tensors of the same shapes: uninitialized floats and zero
integers (no time to make; zeros are valid indices), or, if the code rejects those, the
profiler's values; never for a part over CPU_COUNT_MAX_BYTES (UncountableOnMeta: the
simulation of a large model must not allocate it). Built-in operators skip their checks of
values on meta tensors, so they always count on meta. FlopCounterMode counts
matrix products, convolutions and attention; elementwise work counts zero, which leaves
such parts to the memory term of the analytic model. On meta tensors, what each aten
operator returns is remembered per input signature, and a pointwise one's across shapes
(metamemo.py: the same counts in a fraction of the time).

Kernels are the aten operators the same run dispatches, less views and allocations (which
launch nothing): what a device's per-kernel launch overhead multiplies.

Bytes are the sum of the sizes of the parts the node touches (every requirement once); for an
operator that says `kernel_traffic = True` (attention: its s x s scores and probabilities,
written and read by several kernels, dwarf its inputs and outputs), the bytes every kernel it
dispatches reads and writes, when that is more.
"""
from __future__ import annotations

import contextlib

import torch
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry, shape_wrapper

from .formulas import declared_work
from .metamemo import MetaMemo, _Mode
from .parts import SteadyStep, node_steps
from .profile import Work

_aten = torch.ops.aten
_NO_KERNEL = {_aten.empty.memory_format, _aten.empty_strided.default, _aten.empty_like.default,
              _aten.detach.default, _aten.lift_fresh.default, _aten._local_scalar_dense.default}


_SHAPE_QUERIES = {_aten.sym_is_contiguous.default, _aten.is_contiguous.default,
                  _aten.is_contiguous.memory_format, _aten.is_strides_like_format.default,
                  _aten.is_non_overlapping_and_dense.default, _aten.size.default,
                  _aten.sym_size.default, _aten.stride.default, _aten.sym_stride.default,
                  _aten.storage_offset.default, _aten.sym_storage_offset.default,
                  _aten.numel.default, _aten.sym_numel.default, _aten.dim.default,
                  torch.ops.prim.layout.default}


class _Plan:
    """What Counter does with one aten operator, fixed per operator."""
    __slots__ = ("query", "kernel", "maybe_decompose", "composite", "packet")

    def __init__(self, func):
        self.query = func in _SHAPE_QUERIES
        self.kernel = not func.is_view and func not in _NO_KERNEL
        self.packet = func._overloadpacket
        # decomposed when torch's formulas have none for it (Counter's doc)
        self.maybe_decompose = func is not torch.ops.prim.device.default \
            and torch.Tag.pointwise not in func.tags
        self.composite = torch._C._dispatch_has_kernel_for_dispatch_key(
            func.name(), _COMPOSITE)


_COMPOSITE = torch._C.DispatchKey.CompositeImplicitAutograd


class Counter(_Mode):
    """The FLOPs, kernels and (with `traffic`) kernel bytes of the aten operators run inside
    it, in one dispatch mode (one Python frame per operator, not one per counter).

    FLOPs: by torch's formulas (torch.utils.flop_counter.flop_registry), as
    torch.utils.flop_counter.FlopCounterMode totals them: an operator without a formula is
    decomposed where it can be and its parts counted. Pointwise operators are not
    decomposed: their parts are pointwise too, without formulas, and decomposing them on
    meta tensors runs torch's Python reference implementations, which made counting a
    task 5x slower (18.6 -> 3.6 ms per cost key on Inception-v3 --small).

    Kernels: the operators the code calls (not those of a decomposition), less views and
    allocations; traffic: the bytes of the tensors each of them reads and writes."""

    _PLANS: dict = {}

    def __init__(self, traffic: bool = False, memo: MetaMemo | None = None):
        super().__init__()
        self.flops = self.kernels = self.traffic = 0
        self._traffic = traffic
        self._depth = 0            # > 0 inside a decomposition
        # With `memo`, operators run through it as if it were the next mode down (one
        # mode instead of two: torch's dispatch to a Python mode costs per operator).
        self._run = (lambda func, args, kwargs: func(*args, **kwargs)) if memo is None \
            else (lambda func, args, kwargs: memo.__torch_dispatch__(func, (), args, kwargs))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        plan = self._PLANS.get(func)
        if plan is None:
            plan = self._PLANS[func] = _Plan(func)
        if plan.query:
            return NotImplemented
        out = self._flops(func, plan, args, kwargs)
        if plan.kernel and not self._depth:
            self.kernels += 1
            if self._traffic:
                self.traffic += sum(t.nbytes for t in tree_leaves((args, kwargs, out))
                                    if isinstance(t, torch.Tensor))
        return out

    def _flops(self, func, plan, args, kwargs):
        formula = flop_registry.get(plan.packet)
        if formula is None and plan.maybe_decompose and (
                plan.composite or _COMPOSITE in func.py_kernels):
            self._depth += 1
            try:
                with self:
                    r = func.decompose(*args, **kwargs)
            finally:
                self._depth -= 1
            if r is not NotImplemented:
                return r
        out = self._run(func, args, kwargs)
        if formula is not None:
            self.flops += _apply(formula, args, kwargs, out)
        return out


# torch wraps most FLOP formulas in shape_wrapper, which maps every tensor of the arguments
# to its shape with torch's pytree (~0.3 ms a call); _apply does that mapping itself for
# plain tuples, lists and dicts and calls the formula inside with the same values.
_SHAPED = shape_wrapper(lambda: 0).__code__


class _Opaque(Exception):
    """An argument _shapes does not map as pytree would (a named tuple, say)."""


def _shapes(x):
    if isinstance(x, torch.Tensor):
        return x.shape
    t = type(x)
    if t is tuple or t is list:
        return t([_shapes(y) for y in x])
    if t is dict:
        return {k: _shapes(v) for k, v in x.items()}
    if isinstance(x, (tuple, list, dict)):
        raise _Opaque
    return x


def _apply(formula, args, kwargs, out) -> int:
    """formula(*args, **kwargs, out_val=out), as FlopCounterMode calls it."""
    if getattr(formula, "__code__", None) is not _SHAPED:
        return formula(*args, **kwargs, out_val=out)
    try:
        args, kwargs, shape = _shapes(args), _shapes(kwargs), _shapes(out)
    except _Opaque:
        return formula(*args, **kwargs, out_val=out)
    return formula.__wrapped__(*args, out_shape=shape, **kwargs)


def node_bytes(node) -> int:
    """Bytes of every part the node reads or writes."""
    return sum(r.region.nbytes(r.rect) for r in node.requirements)


def _kernel_traffic(node) -> bool:
    """Whether the node's operator asks for its kernels' bytes (module doc)."""
    return bool(getattr(getattr(node.launch.args, "stage", None), "kernel_traffic", False))


def _count(node, device: str, graph, int_ranges, values: bool = False
           ) -> tuple[int, int, int]:
    fwd, step = node_steps(node, device, graph, int_ranges, values)
    memo = MetaMemo() if device == "meta" else None
    counter = Counter(_kernel_traffic(node), memo)
    if fwd is not None:
        with memo or contextlib.nullcontext():
            fwd()
    with SteadyStep(node), counter:
        step()
    return counter.flops, counter.kernels, counter.traffic


# Counting on real CPU tensors allocates the part's own bytes: above this, refuse (the
# simulator must work from shapes alone; a 128 x 2048 x 6400 logits part is 6.7 GB).
CPU_COUNT_MAX_BYTES = 1 << 28


class UncountableOnMeta(Exception):
    """A task whose code needs values (so not meta tensors) and is too large to run on CPU."""


def _counts(node, graph, int_ranges) -> tuple[int, int, int]:
    try:
        return _count(node, "meta", graph, int_ranges)
    except Exception as e:       # data-dependent code cannot run on meta tensors
        why = e
    if node_bytes(node) > CPU_COUNT_MAX_BYTES:
        raise UncountableOnMeta(
            f"task '{node.launch.name}' cannot be counted on meta tensors ({why}) and "
            f"running it on CPU would allocate {node_bytes(node) / 1e9:.1f} GB; its FLOPs "
            "are taken as 0 (its time comes from its bytes). Make the operator's code work "
            "on meta tensors: skip checks of values when a tensor `is_meta`.") from None
    try:                         # values that cost nothing to make
        return _count(node, "cpu", graph, int_ranges)
    except Exception:            # code that needs positive values
        return _count(node, "cpu", graph, int_ranges, values=True)


def node_flops(node, graph=None, int_ranges=None) -> int:
    """FLOPs of one run of the node (see the module doc)."""
    return _counts(node, graph, int_ranges)[0]


def node_work(node, graph=None, int_ranges=None) -> Work:
    """FLOPs, bytes and kernels of one run of the node: from its operator's declaration
    (formulas.py) when it has one, else counted."""
    w = declared_work(node)
    if w is not None:
        return w
    return counted_work(node, graph, int_ranges)


def counted_work(node, graph=None, int_ranges=None) -> Work:
    """node_work by counting on meta tensors only (the declarations' oracle)."""
    flops, kernels, traffic = _counts(node, graph, int_ranges)
    return Work(float(flops), max(node_bytes(node), traffic), kernels)
