"""Broadcasting: binary add/multiply of tensors of any broadcastable shapes, and expand.

Where elementwise.py's add and multiply take a second operand equal to the first's
trailing axes, these take any two shapes torch broadcasts, e.g. attention scores
(N, H, S, S) plus a mask (N, 1, S, S), or x (N, S, F) times a row statistic (N, S, 1);
`expand` is torch's x.expand(shape) (HF grouped-query attention repeats key/value heads
with it). Dims: n (sample: axis 0) and a1, a2, ... (attribute) of the output. An operand
axis of size 1 (or missing) is read whole by every part; the runtime sums that operand's
gradient parts over the splits of the output axes it broadcasts along.
"""
from __future__ import annotations

import torch

from .elementwise import axis_dims, axis_names
from .errors import ShapeError
from .model import Model, builder
from .op import Op
from .tensor import Tensor

_FUNCTIONS = {"add": torch.add, "multiply": torch.mul}


def _labels(shape, out_shape) -> tuple:
    """An operand's labels: the output's dim where sizes agree, None where it is 1."""
    names = axis_names(len(out_shape))[len(out_shape) - len(shape):]
    return tuple(n if s == o else None
                 for n, s, o in zip(names, shape, out_shape[len(out_shape) - len(shape):]))


class BroadcastBinary(Op):
    """y = f(a, b) with torch's broadcasting; f is add or multiply."""

    def __init__(self, model: Model, fn: str, a: Tensor, b: Tensor, name: str | None = None):
        super().__init__(model.unique_name(f"broadcast_{fn}", name))
        if fn not in _FUNCTIONS:
            raise ShapeError(f"broadcast '{self.name}': unknown function '{fn}'; use one of "
                             f"{sorted(_FUNCTIONS)}.")
        if a.dtype != b.dtype:
            raise ShapeError(f"broadcast_{fn} '{self.name}': '{a.name}' is {a.dtype} and "
                             f"'{b.name}' {b.dtype}. Give tensors of one dtype.")
        try:
            out = tuple(torch.broadcast_shapes(a.shape, b.shape))
        except RuntimeError:
            raise ShapeError(f"broadcast_{fn} '{self.name}': shapes {a.shape} of '{a.name}' "
                             f"and {b.shape} of '{b.name}' do not broadcast.") from None
        self.type = f"broadcast_{fn}"
        self.params = {"shape": out}
        self._fn = _FUNCTIONS[fn]
        self.inputs = list(dict.fromkeys([a, b]))
        self.args = tuple(self.inputs.index(t) for t in (a, b))
        model.new_tensor(self, out, a.dtype)
        self.dims = axis_dims(out)
        self.labels = {"inputs": tuple(_labels(t.shape, out) for t in self.inputs),
                       "weights": (), "outputs": (axis_names(len(out)),)}

    def forward(self, spec, inputs, weights):
        return [self._fn(*(inputs[k] for k in self.args))]

    def reference(self, inputs, weights):
        return self.forward(None, inputs, weights)


class Expand(Op):
    """y = x.expand(shape): axes of size 1 (and new leading axes) repeated."""
    type = "expand"

    def __init__(self, model: Model, x: Tensor, shape, name: str | None = None):
        super().__init__(model.unique_name("expand", name))
        shape = tuple(int(s) for s in shape)
        if len(shape) < x.ndim or any(
                s != o and s != 1 for s, o in zip(x.shape, shape[len(shape) - x.ndim:])):
            raise ShapeError(f"expand '{self.name}': '{x.name}' {x.shape} cannot expand to "
                             f"{shape}; only axes of size 1 grow.")
        self.params = {"shape": shape}
        self.inputs = [x]
        model.new_tensor(self, shape, x.dtype)
        self.dims = axis_dims(shape)
        self.labels = {"inputs": (_labels(x.shape, shape),), "weights": (),
                       "outputs": (axis_names(len(shape)),)}

    def forward(self, spec, inputs, weights):
        return [inputs[0].expand(spec.outputs[0].shape).contiguous()]

    def reference(self, inputs, weights):
        return [inputs[0].expand(self.params["shape"])]


@builder
def broadcast_add(model: Model, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
    """a + b with torch's broadcasting, e.g. (N, H, S, S) + (N, 1, S, S)."""
    return model.add_op(BroadcastBinary(model, "add", a, b, name)).outputs[0]


@builder
def broadcast_multiply(model: Model, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
    """a * b with torch's broadcasting, e.g. (N, S, F) * (N, S, 1)."""
    return model.add_op(BroadcastBinary(model, "multiply", a, b, name)).outputs[0]


@builder
def expand(model: Model, x: Tensor, shape, name: str | None = None) -> Tensor:
    """x.expand(shape), like torch (size-1 axes repeated; new leading axes allowed)."""
    return model.add_op(Expand(model, x, shape, name)).outputs[0]
