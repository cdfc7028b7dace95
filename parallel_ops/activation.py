"""Activations fused into the operator that produces their input (FlexFlow's ActiMode).

conv2d, linear and batchnorm2d take `activation=` one of ACTIVATIONS: each part applies it
to its own output block, so the activation costs no launch of its own (no task, no backward
task, no region for the pre-activation values). A ReLU is applied in place: the producers'
backward (convolution, matrix product, the normalization's affine step) does not read
their output, and autograd's version counters would refuse it if one did.

The activation of a sum cannot be taken part by part, so an operator with an activation
keeps its reduction dim whole (`whole_dim`); to split that dim, use a separate activation
operator (m.relu(...)), which also lets the search give the activation its own config.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from .errors import ShapeError

# name -> the torch function (shared with the elementwise operators of the same names)
ACTIVATIONS: dict[str, Callable] = {
    "relu": F.relu,
    "gelu": F.gelu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
}


def check_activation(where: str, activation) -> str | None:
    """`activation` if it is None or a known name, else a ShapeError naming the operator."""
    if activation is None or activation in ACTIVATIONS:
        return activation
    raise ShapeError(f"{where}: activation {activation!r} is not supported. Use one of "
                     f"{sorted(ACTIVATIONS)}, or None.")


def activate(activation: str | None, y: torch.Tensor) -> torch.Tensor:
    """y after the activation (in place for a ReLU; see the module doc)."""
    if activation is None:
        return y
    if activation == "relu":
        return y.relu_()
    return ACTIVATIONS[activation](y)


def whole_reason(activation: str) -> str:
    """Why an operator with `activation` keeps its reduction dim whole (Dim.whole)."""
    return (f"the fused activation '{activation}' needs whole sums; to split this dim, "
            f"apply {activation} as its own operator")
