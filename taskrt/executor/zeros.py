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


def zero_contribution(shape, dtype, device) -> torch.Tensor:
    """A zero tensor of `shape` (a broadcast scalar: nothing of that size is made) that the
    executors recognize (`is_zero`). Made afresh every call (not kept per shape): the cost
    model counts a part's operations on its first run (strategy.costs), so a part must run
    the same operations every time."""
    z = torch.zeros((), dtype=dtype, device=device).expand(shape)
    setattr(z, _MARK, True)
    return z


def is_zero(value) -> bool:
    """Whether `value` came from zero_contribution."""
    return getattr(value, _MARK, False)
