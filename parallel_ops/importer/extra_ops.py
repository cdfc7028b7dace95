"""Small operators the importer needs for PyTorch code that the built-in operators do not
cover one to one. They are ordinary custom operators (docs/custom_ops.md): labels plus a
torch function for one part.

  scalar_<fn>  y = fn(x, c) for a Python number c: add, sub, rsub (c - x), mul, div,
               rdiv (c / x), pow. Dims as elementwise: n (sample), a1.. (attribute).
  parameter    a learned tensor used directly in arithmetic (`x + self.pos`). Its one
               weight is the module's parameter in torch's shape; the output drops the
               weight's leading size-1 axes. Dims: a0, a1.. (parameter: each splits the
               weight), so by default it runs on one device.
  constant     a fixed tensor (a buffer or a folded expression) used as an activation;
               its value is a non-trainable weight. Dims as `parameter`.
  sdpa         scaled dot-product attention of q, k, v (N, H, S, D) -> (N, H, S, D),
               like F.scaled_dot_product_attention with no mask or a causal one. Dims:
               n (sample), h (attribute: heads), s (attribute: query positions; every part
               reads the keys and values of all positions, or up to its last query when
               causal).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from taskrt.geometry import Rect

from ..elementwise import axis_dims, axis_names
from ..errors import ShapeError
from ..model import Model
from ..op import ATTRIBUTE, PARAMETER, SAMPLE, Dim, Op, PartSpec
from ..tensor import Tensor


def register(model: Model, op: Op) -> Op:
    """Check and initialize an op (Model.add_op)."""
    return model.add_op(op)


_SCALAR_FUNCTIONS = {
    "add": lambda x, c: torch.add(x, c),
    "sub": lambda x, c: torch.sub(x, c),
    "rsub": lambda x, c: x.__rsub__(c),
    "mul": lambda x, c: torch.mul(x, c),
    "div": lambda x, c: torch.div(x, c),
    "rdiv": lambda x, c: x.__rtruediv__(c),
    "pow": lambda x, c: torch.pow(x, c),
}


class ScalarOp(Op):
    """y = fn(x, c) elementwise, for a Python number c."""

    def __init__(self, model: Model, x: Tensor, fn: str, c, name: str | None = None):
        super().__init__(model.unique_name(f"scalar_{fn}", name))
        if fn not in _SCALAR_FUNCTIONS:
            raise ShapeError(f"scalar op '{self.name}': unknown function '{fn}'; use one of "
                             f"{sorted(_SCALAR_FUNCTIONS)}.")
        self.type = f"scalar_{fn}"
        self.params = {"c": c}
        self.inputs = [x]
        model.new_tensor(self, x.shape, x.dtype)
        names = axis_names(x.ndim)
        self.dims = axis_dims(x.shape)
        self.labels = {"inputs": (names,), "weights": (), "outputs": (names,)}
        self._fn = _SCALAR_FUNCTIONS[fn]

    def forward(self, spec, inputs, weights):
        return [self._fn(inputs[0], self.params["c"])]

    def reference(self, inputs, weights):
        return [self._fn(inputs[0], self.params["c"])]


def _squeezed(shape) -> tuple[int, ...]:
    shape = tuple(shape)
    k = 0
    while k < len(shape) - 1 and shape[k] == 1:
        k += 1
    return shape[k:]


class _TensorValue(Op):
    """An activation whose value is this op's single weight (leading 1-axes dropped)."""

    def __init__(self, model: Model, type: str, shape, trainable: bool, name: str | None):
        super().__init__(model.unique_name(type, name))
        self.type = type
        shape = tuple(int(s) for s in shape)
        out = _squeezed(shape)
        lead = len(shape) - len(out)
        model.new_weight(self, "value", shape, trainable=trainable)
        y = model.new_tensor(self, out, model.dtype)
        y.requires_grad = trainable
        names = tuple(f"a{k}" for k in range(len(out)))
        self.dims = tuple(Dim(nm, PARAMETER, s) for nm, s in zip(names, out))
        self.labels = {"inputs": (), "weights": ((None,) * lead + names,), "outputs": (names,)}
        self.params = {"shape": shape}

    def forward(self, spec, inputs, weights):
        return [weights[0].reshape(spec.outputs[0].shape)]

    def reference(self, inputs, weights):
        return [weights[0].reshape(self.outputs[0].shape)]

    def init_weights(self, generator):
        return [torch.zeros(self.params["shape"])]


class ParameterOp(_TensorValue):
    def __init__(self, model: Model, shape, name: str | None = None):
        super().__init__(model, "parameter", shape, True, name)


class ConstantOp(_TensorValue):
    def __init__(self, model: Model, shape, name: str | None = None):
        super().__init__(model, "constant", shape, False, name)


class SDPA(Op):
    type = "sdpa"

    def __init__(self, model: Model, q: Tensor, k: Tensor, v: Tensor, causal: bool = False,
                 scale: float | None = None, name: str | None = None):
        super().__init__(model.unique_name("sdpa", name))
        if q.ndim != 4 or k.shape != q.shape or v.shape != q.shape:
            raise ShapeError(f"sdpa '{self.name}': q {q.shape}, k {k.shape} and v {v.shape} "
                             "must all be (batch, heads, sequence, head_dim).")
        n, h, s, d = q.shape
        self.params = {"causal": bool(causal), "scale": scale}
        self.inputs = list(dict.fromkeys([q, k, v]))
        self.args = tuple(self.inputs.index(t) for t in (q, k, v))
        model.new_tensor(self, q.shape, q.dtype)
        self.dims = (Dim("n", SAMPLE, n), Dim("h", ATTRIBUTE, h), Dim("s", ATTRIBUTE, s))
        q_lab, kv_lab = ("n", "h", "s", None), ("n", "h", None, None)
        self.labels = {"inputs": tuple(q_lab if j == self.args[0] else kv_lab
                                       for j in range(len(self.inputs))),
                       "weights": (), "outputs": (q_lab,)}
        if len(self.inputs) < 3 and self.args[0] in self.args[1:]:
            # q shares a tensor with k or v: that input must be read whole on the s axis.
            self.labels["inputs"] = tuple(kv_lab for _ in self.inputs)

    def part(self, degrees, color) -> PartSpec:
        spec = super().part(degrees, color)
        s0, s1 = self.ranges(degrees, color)["s"]
        ins = []
        for r in spec.inputs:
            if self.params["causal"] and r.hi[2] == self.inputs[0].shape[2] and r.lo[2] == 0:
                r = Rect(r.lo, r.hi[:2] + (s1,) + r.hi[3:])   # later keys are masked out
            ins.append(r)
        return PartSpec(tuple(ins), (), spec.outputs, info=(s0, s1))

    def forward(self, spec, inputs, weights):
        s0, s1 = spec.info
        q, k, v = (inputs[j] for j in self.args)
        if q.shape[2] != s1 - s0:
            q = q[:, :, s0:s1]
        scale = self.params["scale"]
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        scores = torch.matmul(q, k.transpose(-2, -1)) * scale
        if self.params["causal"]:
            allowed = (torch.arange(k.shape[2], device=q.device).unsqueeze(0)
                       <= torch.arange(s0, s1, device=q.device).unsqueeze(1))
            scores = scores.masked_fill(~allowed, float("-inf"))
        return [torch.matmul(torch.softmax(scores, dim=-1), v)]

    def reference(self, inputs, weights):
        q, k, v = (inputs[j] for j in self.args)
        return [F.scaled_dot_product_attention(q, k, v, is_causal=self.params["causal"],
                                               scale=self.params["scale"])]
