"""Pointwise functions of one tensor without a parameter: silu, rsqrt, sqrt, exp, log,
cos, sin, abs, square, and clamp and hardtanh with number bounds (relu, gelu, tanh, sigmoid,
relu6 live in elementwise.py with explicit derivatives; these use autograd's).

Dims: n (sample: axis 0) and a1, a2, ... (attribute); a part applies the function to its
block. SiLU is HF Llama's activation (`x * sigmoid(x)` of SwiGLU); rsqrt is RMSNorm's.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .elementwise import axis_dims, axis_names
from .errors import ShapeError
from .model import Model, builder
from .op import Op
from .tensor import Tensor

FUNCTIONS = {"silu": F.silu, "rsqrt": torch.rsqrt, "sqrt": torch.sqrt, "exp": torch.exp,
             "log": torch.log, "cos": torch.cos, "sin": torch.sin, "abs": torch.abs,
             "square": torch.square}
# x limited to [min, max] (built by `clamp` and `hardtanh` below). Two types because their
# gradients differ where x equals a bound: torch.clamp passes it there, F.hardtanh does
# not (ReLU6 is hardtanh(0, 6), the fusable activation `relu6` of activation.py).
BOUNDED = {"clamp": lambda x, min=None, max=None: torch.clamp(x, min, max),
           "hardtanh": lambda x, min_val=-1.0, max_val=1.0: F.hardtanh(x, min_val, max_val)}


class Unary(Op):
    """y = f(x, **params) elementwise for one of FUNCTIONS."""

    def __init__(self, model: Model, fn: str, x: Tensor, name: str | None = None, **params):
        super().__init__(model.unique_name(fn, name))
        self.params = params
        if fn not in FUNCTIONS and fn not in BOUNDED:
            raise ShapeError(f"unary '{self.name}': unknown function '{fn}'; use one of "
                             f"{sorted(FUNCTIONS)}.")
        self._fn = FUNCTIONS.get(fn) or BOUNDED[fn]
        if x.ndim < 1:
            raise ShapeError(f"{fn} '{self.name}': input '{x.name}' is a scalar; it needs "
                             "at least a batch axis.")
        self.type = fn
        self.inputs = [x]
        model.new_tensor(self, x.shape, x.dtype)
        names = axis_names(x.ndim)
        self.dims = axis_dims(x.shape)
        self.labels = {"inputs": (names,), "weights": (), "outputs": (names,)}

    def forward(self, spec, inputs, weights):
        return [self._fn(inputs[0], **self.params)]

    def reference(self, inputs, weights):
        return self.forward(None, inputs, weights)


@builder
def unary(model: Model, fn: str, x: Tensor, name: str | None = None) -> Tensor:
    """fn(x) elementwise, fn one of silu, rsqrt, sqrt, exp, log, cos, sin, abs, square."""
    return model.add_op(Unary(model, fn, x, name)).outputs[0]


@builder
def clamp(model: Model, x: Tensor, min=None, max=None, name: str | None = None) -> Tensor:
    """x limited to [min, max] (either may be None), like torch.clamp(x, min, max)."""
    if min is None and max is None:
        raise ShapeError(f"clamp of '{x.name}': give a min, a max or both.")
    if min is not None and max is not None and min > max:
        raise ShapeError(f"clamp of '{x.name}': min {min} is above max {max}.")
    return model.add_op(Unary(model, "clamp", x, name, min=min, max=max)).outputs[0]


@builder
def hardtanh(model: Model, x: Tensor, min_val: float = -1.0, max_val: float = 1.0,
             name: str | None = None) -> Tensor:
    """x limited to [min_val, max_val], like F.hardtanh (no gradient at the bounds)."""
    if min_val > max_val:
        raise ShapeError(f"hardtanh of '{x.name}': min {min_val} is above max {max_val}.")
    return model.add_op(Unary(model, "hardtanh", x, name, min_val=min_val,
                              max_val=max_val)).outputs[0]
