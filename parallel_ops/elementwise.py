"""Elementwise operators: relu, gelu, tanh, sigmoid, relu6 (one input), add and multiply (two).

Dims: n (sample: axis 0) and a1, a2, ... (attribute: every other axis, named by its
position). A part reads the same block of every input as it writes. The second input of
add/multiply may also be a per-feature tensor whose shape equals the first input's trailing
axes (like a bias, e.g. (F,) against (N, S, F)): it is labelled by those axes' dims, so a
part reads its block of it and the runtime sums its gradient parts over the other splits.
Other broadcasts are refused. `axis_dims` is shared with the dropout and shape operators.
"""
from __future__ import annotations

from typing import Callable

import torch

from .activation import (ACTIVATIONS, FusesActivation, activate, activate_saving, activated,
                         activation_backward, activation_saved, check_activation)
from .errors import ShapeError
from .model import Model, builder
from .op import ATTRIBUTE, SAMPLE, Dim, Op, PartWork
from .workshape import activation_backward_kernels, activation_kernels, activation_saved_bytes
from .tensor import Tensor


def axis_names(ndim: int) -> tuple[str, ...]:
    """Dim names of a tensor's axes: ('n', 'a1', 'a2', ...)."""
    return ("n",) + tuple(f"a{k}" for k in range(1, ndim))


def axis_dims(shape) -> tuple[Dim, ...]:
    """One dim per axis: n (sample) for axis 0, a<k> (attribute) for axis k."""
    return tuple(Dim(name, SAMPLE if k == 0 else ATTRIBUTE, ext)
                 for k, (name, ext) in enumerate(zip(axis_names(len(shape)), shape)))


# type -> the torch function; a part applies it to its blocks, the oracle to whole tensors.
_FUNCTIONS: dict[str, Callable] = {**ACTIVATIONS, "add": torch.add, "multiply": torch.mul}
_BINARY = ("add", "multiply")


class Elementwise(FusesActivation, Op):
    """y = f(x) or y = f(a, b), computed part by part on equal blocks; add and multiply may
    apply a fused activation to y (relu(a + b): parallel_ops/activation.py)."""

    def __init__(self, model: Model, type: str, inputs: list[Tensor], name: str | None = None,
                 activation: str | None = None, **params):
        super().__init__(model.unique_name(type, name))
        self.type = type
        self.kwargs = params             # the torch function's (params adds the activation)
        self.params = dict(params)
        check_activation(f"{type} '{self.name}'", activation)
        if activation is not None and not self.takes_activation():
            raise ShapeError(f"{type} '{self.name}': only add and multiply take a fused "
                             f"activation; apply {activation} as an operator of its own.")
        x = inputs[0]
        if x.ndim < 1:
            raise ShapeError(f"{type} '{self.name}': input '{x.name}' is a scalar; it needs "
                             "at least a batch axis.")
        names = axis_names(x.ndim)
        labels = [names]
        for other in inputs[1:]:
            if other.dtype != x.dtype:
                raise ShapeError(f"{type} '{self.name}': inputs '{x.name}' ({x.dtype}) and "
                                 f"'{other.name}' ({other.dtype}) have different dtypes. "
                                 "Give tensors of one dtype.")
            k = other.ndim
            if not 1 <= k <= x.ndim or tuple(other.shape) != tuple(x.shape[x.ndim - k:]):
                raise ShapeError(f"{type} '{self.name}': shapes {x.shape} of '{x.name}' and "
                                 f"{other.shape} of '{other.name}' do not match. Give the "
                                 "second tensor the first's shape or its trailing axes "
                                 f"(e.g. {x.shape[-1:]} for a per-feature tensor).")
            labels.append(names[x.ndim - k:])
        # A tensor given twice (x * x) is one input: one point may not reduce into the
        # same gradient rect through two requirements.
        self.inputs = list(dict.fromkeys(inputs))
        self.args = tuple(self.inputs.index(t) for t in inputs)
        model.new_tensor(self, x.shape, x.dtype)
        self.dims = axis_dims(x.shape)
        self.labels = {"inputs": tuple(labels[self.args.index(k)]
                                       for k in range(len(self.inputs))),
                       "weights": (), "outputs": (names,)}
        self.set_activation(activation)

    def takes_activation(self) -> bool:
        """Only binary ones: a unary function's backward may read its output (tanh), which
        an in-place activation would overwrite."""
        return self.type in ("add", "multiply")

    def forward(self, spec, inputs, weights):
        y = _FUNCTIONS[self.type](*(inputs[k] for k in self.args), **self.kwargs)
        return [activate(self.activation, y)]

    # Every type gives its own derivative: the activations theirs, add and multiply (with any
    # fused activation) the gradients autograd gives (AddBackward0, MulBackward0, summed to
    # a broadcast input's shape as the engine does).
    explicit_backward = True

    def forward_saving(self, spec, inputs, weights):
        """forward() without autograd, saving what the derivative reads."""
        if self.type not in _BINARY:
            x = inputs[0]
            y = _FUNCTIONS[self.type](x, **self.kwargs)
            return [y], activation_saved(self.type, x, y)
        args = [inputs[k] for k in self.args]
        if any(a is None for a in args):
            return None
        y, act = activate_saving(self.activation, _FUNCTIONS[self.type](*args))
        return [y], (args if self.type == "multiply" else [a.shape for a in args], act)

    def backward(self, spec, saved, output_grads, need_inputs, need_weights):
        """The activation's derivative as autograd computes it; for add and multiply, the
        gradient of each argument (of a tensor given twice, their sum)."""
        if self.type not in _BINARY:
            return [activation_backward(self.type, output_grads[0], saved, self,
                                        **self.kwargs)], []
        kept, act = saved
        dy = activation_backward(self.activation, output_grads[0], act, self)
        grads = [None] * len(self.inputs)
        for pos, k in enumerate(self.args):
            if not need_inputs[k]:
                continue
            if self.type == "multiply":
                g, shape = dy * kept[1 - pos], kept[pos].shape
            else:
                g, shape = dy, kept[pos]
            if g.shape != shape:
                g = g.sum_to_size(shape)
            grads[k] = g if grads[k] is None else grads[k] + g
        return grads, []

    def saved_state_bytes(self, spec, input_grads, weight_grads):
        """add and multiply: their inputs (regions) or shapes and what the fused activation's
        derivative reads; unary functions are measured."""
        if self.type not in _BINARY or any(spec.inputs[k].empty for k in self.args):
            return None
        return activation_saved_bytes(self.activation, spec.outputs[0].shape,
                                      self.outputs[0].dtype)

    def work(self, phase, spec, plan):
        """The function (and a fused activation); backward: the derivative (the
        activation's, a product per multiply argument, a sum down to a broadcast
        argument's shape, a sum of a tensor given twice)."""
        if self.type not in _BINARY:
            return PartWork(0, 1)
        if any(spec.inputs[k].empty for k in self.args):
            return None
        if phase == "fwd":
            return PartWork(0, 1 + activation_kernels(self.activation))
        out_ndim = len(spec.outputs[0].shape)
        kernels, seen = activation_backward_kernels(self.activation), set()
        for k in self.args:
            if not plan.need_inputs[k]:
                continue
            kernels += (self.type == "multiply") + (len(spec.inputs[k].shape) != out_ndim) \
                + (k in seen)
            seen.add(k)
        return PartWork(0, kernels)

    def reference(self, inputs, weights):
        y = _FUNCTIONS[self.type](*(inputs[k] for k in self.args), **self.kwargs)
        return [activated(self.activation, y)]


@builder
def relu(model: Model, x: Tensor, name: str | None = None) -> Tensor:
    """max(x, 0), like torch.relu(x)."""
    return model.add_op(Elementwise(model, "relu", [x], name)).outputs[0]


@builder
def gelu(model: Model, x: Tensor, approximate: str = "none", name: str | None = None) -> Tensor:
    """GELU, like torch.nn.functional.gelu(x, approximate=approximate) ('none' or 'tanh')."""
    if approximate not in ("none", "tanh"):
        raise ShapeError(f"gelu: approximate={approximate!r} is not supported. Use 'none' "
                         "or 'tanh'.")
    return model.add_op(Elementwise(model, "gelu", [x], name, approximate=approximate)).outputs[0]


@builder
def tanh(model: Model, x: Tensor, name: str | None = None) -> Tensor:
    """Hyperbolic tangent, like torch.tanh(x)."""
    return model.add_op(Elementwise(model, "tanh", [x], name)).outputs[0]


@builder
def sigmoid(model: Model, x: Tensor, name: str | None = None) -> Tensor:
    """Logistic sigmoid, like torch.sigmoid(x)."""
    return model.add_op(Elementwise(model, "sigmoid", [x], name)).outputs[0]


@builder
def relu6(model: Model, x: Tensor, name: str | None = None) -> Tensor:
    """min(max(x, 0), 6), like F.relu6(x) (MobileNet's activation)."""
    return model.add_op(Elementwise(model, "relu6", [x], name)).outputs[0]


@builder
def add(model: Model, a: Tensor, b: Tensor, name: str | None = None,
        activation: str | None = None) -> Tensor:
    """a + b, like torch.add(a, b); b has a's shape or its trailing axes. `activation`
    ("relu", ...) follows in the same launch (parallel_ops/activation.py)."""
    return model.add_op(Elementwise(model, "add", [a, b], name, activation)).outputs[0]


@builder
def multiply(model: Model, a: Tensor, b: Tensor, name: str | None = None,
             activation: str | None = None) -> Tensor:
    """a * b, like torch.mul(a, b); b has a's shape or its trailing axes. `activation`
    ("relu", ...) follows in the same launch (parallel_ops/activation.py)."""
    return model.add_op(Elementwise(model, "multiply", [a, b], name, activation)).outputs[0]
