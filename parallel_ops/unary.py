"""Pointwise functions of one tensor without a parameter: silu, rsqrt, sqrt, exp, log,
cos, sin, abs, square (relu, gelu, tanh, sigmoid live in elementwise.py with explicit
derivatives; these use autograd's).

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


class Unary(Op):
    """y = f(x) elementwise for one of FUNCTIONS."""

    def __init__(self, model: Model, fn: str, x: Tensor, name: str | None = None):
        super().__init__(model.unique_name(fn, name))
        if fn not in FUNCTIONS:
            raise ShapeError(f"unary '{self.name}': unknown function '{fn}'; use one of "
                             f"{sorted(FUNCTIONS)}.")
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
        return [FUNCTIONS[self.type](inputs[0])]

    def reference(self, inputs, weights):
        return self.forward(None, inputs, weights)


@builder
def unary(model: Model, fn: str, x: Tensor, name: str | None = None) -> Tensor:
    """fn(x) elementwise, fn one of silu, rsqrt, sqrt, exp, log, cos, sin, abs, square."""
    return model.add_op(Unary(model, fn, x, name)).outputs[0]
