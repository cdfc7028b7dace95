"""clamp and hardtanh: x limited to [min, max], like torch.clamp and F.hardtanh.

Two types because their gradients differ where x equals a bound: torch.clamp passes the
gradient there, F.hardtanh does not (ReLU6 is hardtanh(0, 6); the activation `relu6`
fuses into a producer, see activation.py). Dims as elementwise: n (sample), a1.. (attribute).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .elementwise import axis_dims, axis_names
from .errors import ShapeError
from .model import Model, builder
from .op import Op
from .tensor import Tensor

_FUNCTIONS = {"clamp": lambda x, lo, hi: torch.clamp(x, lo, hi),
              "hardtanh": lambda x, lo, hi: F.hardtanh(x, lo, hi)}


class Clamp(Op):
    def __init__(self, model: Model, x: Tensor, type: str, lo, hi, name: str | None = None):
        super().__init__(model.unique_name(type, name))
        if lo is None and hi is None:
            raise ShapeError(f"{type} '{self.name}': give a min, a max or both.")
        if lo is not None and hi is not None and lo > hi:
            raise ShapeError(f"{type} '{self.name}': min {lo} is above max {hi}.")
        if x.ndim < 1:
            raise ShapeError(f"{type} '{self.name}': input '{x.name}' is a scalar; it needs "
                             "at least a batch axis.")
        self.type = type
        self.params = {"min": lo, "max": hi}
        self.inputs = [x]
        model.new_tensor(self, x.shape, x.dtype)
        names = axis_names(x.ndim)
        self.dims = axis_dims(x.shape)
        self.labels = {"inputs": (names,), "weights": (), "outputs": (names,)}

    def forward(self, spec, inputs, weights):
        return [_FUNCTIONS[self.type](inputs[0], self.params["min"], self.params["max"])]

    def reference(self, inputs, weights):
        return self.forward(None, inputs, weights)


@builder
def clamp(model: Model, x: Tensor, min=None, max=None, name: str | None = None) -> Tensor:
    """x limited to [min, max] (either may be None), like torch.clamp(x, min, max)."""
    return model.add_op(Clamp(model, x, "clamp", min, max, name)).outputs[0]


@builder
def hardtanh(model: Model, x: Tensor, min_val: float = -1.0, max_val: float = 1.0,
             name: str | None = None) -> Tensor:
    """x limited to [min_val, max_val], like F.hardtanh (no gradient at the bounds)."""
    return model.add_op(Clamp(model, x, "hardtanh", min_val, max_val, name)).outputs[0]
