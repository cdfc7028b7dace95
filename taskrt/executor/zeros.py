"""Zero contributions: a gradient a task knows to be zero, returned without being computed.

A task's Red+ contribution that is zero everywhere (a statistics stage whose input gradient
another stage gives in full: batch norm's, layer norm's, softmax's for parts of whole rows)
is a broadcast scalar zero marked by `zero_contribution`. The executors' task steps
(taskrt.executor.steps) skip adding it onto partial sums already there (an add of zeros is
a full pass over the gradient for nothing: two per batch norm layer) and zero a target it
is stored into (zero_(), no read of a broadcast source). Unmarked tensors are taken as they
are, so a task that returns plain zeros stays correct, only slower.
"""
from __future__ import annotations

import torch

_MARK = "_taskrt_zero"


_made: dict = {}              # (shape, dtype, device) -> its zero contribution


def zero_contribution(shape, dtype, device) -> torch.Tensor:
    """A zero tensor of `shape` (a broadcast scalar: nothing of that size is made) that the
    executors recognize (`is_zero`). One per shape, dtype and device is made and handed out
    again (two aten operations saved per call): with more than one element it is a
    broadcast, which no in-place operation can write and no buffer adopts; a one-element
    zero could be both, so it is made afresh."""
    key = (tuple(shape), dtype, str(device))
    z = _made.get(key)
    if z is None:
        z = torch.zeros((), dtype=dtype, device=device).expand(key[0])
        setattr(z, _MARK, True)
        if z.numel() > 1:
            _made[key] = z
    return z


def is_zero(value) -> bool:
    """Whether `value` came from zero_contribution."""
    return getattr(value, _MARK, False)
