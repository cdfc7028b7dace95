"""cast: x.to(dtype) between floating dtypes, e.g. HF's `logits.float()` before the loss.

The output has the new dtype; the gradient comes back in the input's dtype, as autograd's
does. Dims: n (sample: axis 0) and a1, a2, ... (attribute), each part casts its block.
"""
from __future__ import annotations

import torch

from .elementwise import axis_dims, axis_names
from .errors import ShapeError
from .model import Model, builder
from .op import Op
from .tensor import Tensor

_FLOATS = ("float16", "bfloat16", "float32", "float64")


class Cast(Op):
    type = "cast"

    def __init__(self, model: Model, x: Tensor, dtype: str, name: str | None = None):
        super().__init__(model.unique_name("cast", name))
        if x.dtype not in _FLOATS or dtype not in _FLOATS:
            raise ShapeError(f"cast '{self.name}': '{x.name}' {x.dtype} to {dtype}; only "
                             f"between floating dtypes {_FLOATS}.")
        self.params = {"dtype": dtype}
        self.inputs = [x]
        y = model.new_tensor(self, x.shape, dtype)
        y.requires_grad = x.requires_grad
        names = axis_names(x.ndim)
        self.dims = axis_dims(x.shape)
        self.labels = {"inputs": (names,), "weights": (), "outputs": (names,)}

    def forward(self, spec, inputs, weights):
        return [inputs[0].to(getattr(torch, self.params["dtype"]))]

    def reference(self, inputs, weights):
        return self.forward(None, inputs, weights)


@builder
def cast(model: Model, x: Tensor, dtype: str, name: str | None = None) -> Tensor:
    """x.to(dtype) for floating dtypes ('float32', 'float64', ...)."""
    return model.add_op(Cast(model, x, dtype, name)).outputs[0]
