"""Shape arithmetic for operators' declared work (`Op.work`, `PartWork`).

An operator may declare, per phase, the work of one part as a function of its part shapes:
the FLOPs of the matrix products and convolutions it runs (by torch's own FLOP formulas,
torch.utils.flop_counter, the ones counting on meta tensors applies) and the number of
kernels its task function dispatches. What is shared between operators lives here: the
formulas on shapes, a part's size, and the kernels of a fused activation and of its
derivative. The cost model (strategy/costs/formulas.py) adds the executor's own kernels
(storing each returned value) and checks nothing: tests/strategy/test_work_formulas.py
compares every declaration with counting.
"""
from __future__ import annotations

from math import prod

import torch

from torch.utils.flop_counter import (addmm_flop, bmm_flop, conv_backward_flop,
                                      conv_flop_count, mm_flop)


def _raw(f):
    """The formula on shapes (torch wraps most in shape_wrapper, which maps tensors)."""
    return getattr(f, "__wrapped__", f)


_mm, _addmm, _bmm, _conv_bwd = _raw(mm_flop), _raw(addmm_flop), _raw(bmm_flop), \
    _raw(conv_backward_flop)


def mm(a, b) -> int:
    """FLOPs of aten.mm (and addmm) of matrices of shapes a and b."""
    return _mm(tuple(a), tuple(b))


def bmm(a, b) -> int:
    """FLOPs of aten.bmm (and baddbmm) of batched matrices of shapes a and b."""
    return _bmm(tuple(a), tuple(b))


def conv(x, w, out) -> int:
    """FLOPs of aten.convolution of input shape x, weight w, output out."""
    return conv_flop_count(list(x), list(w), list(out), False)


def conv_backward(dy, x, w, mask) -> int:
    """FLOPs of aten.convolution_backward with output_mask `mask` (input, weight, bias)."""
    return _conv_bwd(tuple(dy), tuple(x), tuple(w), None, None, None, None, False, None,
                     None, mask, (tuple(x), tuple(w), None))


def numel(shape) -> int:
    return prod(shape)


def activation_kernels(activation) -> int:
    """Kernels a fused activation adds to a forward part (parallel_ops.activation)."""
    return 0 if activation is None else 1


def activation_backward_kernels(activation) -> int:
    """Kernels of its derivative in an explicit backward (activation_backward)."""
    return 0 if activation is None else 1


def contiguous_strides(shape) -> tuple:
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= d
    return tuple(reversed(out))


def viewable(shape, strides, new_shape) -> bool:
    """Whether torch's reshape of a tensor (shape, strides) to new_shape is a view (no
    kernel) rather than a clone (ATen's computeStride, for tensors with elements)."""
    view_d, chunk, tensor_numel, view_numel = len(new_shape) - 1, strides[-1], 1, 1
    for d in range(len(shape) - 1, -1, -1):
        tensor_numel *= shape[d]
        if d == 0 or (shape[d - 1] != 1 and strides[d - 1] != tensor_numel * chunk):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return False
            if d > 0:
                chunk, tensor_numel, view_numel = strides[d - 1], 1, 1
    return view_d == -1


def activation_saved_bytes(activation, out_shape, dtype: str) -> int:
    """Bytes a fused activation's derivative keeps besides the part's regions
    (parallel_ops.activation.activation_saved): the pre-activation values, for those whose
    derivative reads its input (computed out of place); none for one that reads its output."""
    if activation not in ("gelu", "relu6"):
        return 0
    return prod(out_shape) * getattr(torch, dtype).itemsize
