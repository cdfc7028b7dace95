"""Activations fused into the operator that produces their input (FlexFlow's ActiMode).

conv2d, linear, batchnorm2d, add and multiply take `activation=` one of ACTIVATIONS: each
part applies it to its own output block, so the activation costs no launch of its own (no
task, no backward task, no region for the pre-activation values). A ReLU is applied in
place: those producers' backward (convolution, matrix product, the normalization's affine
step, a sum or product) does not read their output, and autograd's version counters would
refuse it if one did.

The activation of a sum cannot be taken part by part, so an operator with an activation
keeps its reduction dim whole (Dim.whole); to split that dim, use a separate activation
operator (m.relu(...)), which also lets the search give the activation its own config.

`fuse_activations(model)` folds activation operators into their producers after the fact
(import_module does it): an activation whose input only it reads.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

import torch
import torch.nn.functional as F

from .errors import ShapeError
from .op import REDUCTION

# name -> the torch function (shared with the elementwise operators of the same names)
ACTIVATIONS: dict[str, Callable] = {
    "relu": torch.relu,          # F.relu's own kernel, without its Python wrapper
    "gelu": F.gelu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "relu6": F.relu6,
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


# name -> (what its derivative reads: the activation's "output" or its "input", the
# derivative as autograd computes it: f(output gradient, what it reads, **torch kwargs))
# (The operators' `.default` overloads: the same kernels, without the overload packet's
# resolution on every call.)
_aten = torch.ops.aten
# (For the ReLU, the commonest, the overload's own operator: without OpOverload.__call__'s
# Python frame.)
_threshold_backward = getattr(_aten.threshold_backward.default, "_op",
                              _aten.threshold_backward.default)
_DERIVATIVES: dict[str, tuple[str, Callable]] = {
    "relu": ("output", lambda dy, y: _threshold_backward(dy, y, 0)),
    "tanh": ("output", _aten.tanh_backward.default),
    "sigmoid": ("output", _aten.sigmoid_backward.default),
    "gelu": ("input", lambda dy, x, approximate="none":
             _aten.gelu_backward.default(dy, x, approximate=approximate)),
    "relu6": ("input", lambda dy, x: _aten.hardtanh_backward.default(dy, x, 0.0, 6.0)),
}


def activation_saved(activation: str | None, x: torch.Tensor, y: torch.Tensor):
    """What `activation_backward` needs of y = activation(x), for operators with their own
    backward (Op.explicit_backward)."""
    if activation is None:
        return None
    kept = y if _DERIVATIVES[activation][0] == "output" else x
    return kept, kept._version


def activate_saving(activation: str | None, y: torch.Tensor):
    """(y after the activation as `activate` computes it, what `activation_backward`
    needs)."""
    out = activate(activation, y)
    return out, activation_saved(activation, y, out)


def activation_backward(activation: str | None, dy: torch.Tensor, saved, op,
                        **kwargs) -> torch.Tensor:
    """The gradient of the activation's input from its output's: the operations autograd
    runs for it (same results, bit for bit). Like autograd, refuses a saved output that was
    changed in place since forward (the error names `op`)."""
    if activation is None:
        return dy
    kept, version = saved
    if kept._version != version:
        raise RuntimeError(f"{op}: the output of its {activation} was changed in place "
                           "after forward; backward needs it as forward left it.")
    return _DERIVATIVES[activation][1](dy, kept, **kwargs)


def activated(activation: str | None, y: torch.Tensor) -> torch.Tensor:
    """y after the activation, out of place (the operators' whole-tensor references)."""
    return y if activation is None else ACTIVATIONS[activation](y)


def whole_reason(activation: str) -> str:
    """Why an operator with `activation` keeps its reduction dim whole (Dim.whole)."""
    return (f"the fused activation '{activation}' needs whole sums; to split this dim, keep "
            f"{activation} an operator of its own (model.{activation}(...), or "
            "import_module(..., fuse_activations=False))")


class FusesActivation:
    """Mixin of operators that can apply an activation to their single output: conv2d,
    linear, batchnorm2d, add and multiply. Their forward calls `activate(self.activation,
    y)`."""
    activation: str | None = None

    def set_activation(self, activation: str | None) -> None:
        """Give the operator its activation (checked): the attribute, the cost key's param
        (absent without one, so profiles of plain operators keep matching) and its
        reduction dims kept whole."""
        activation = check_activation(f"{self.type} '{self.name}'", activation)
        self.activation = activation
        if activation is None:
            return
        self.params["activation"] = activation
        self.dims = tuple(replace(d, whole=whole_reason(activation)) if d.kind == REDUCTION
                          else d for d in self.dims)

    def takes_activation(self) -> bool:
        """Whether this operator may get an activation (all but some elementwise ones)."""
        return True

    def output_writers(self) -> list:
        """The operator and stages whose outputs include the operator's output."""
        return [self]

    def fuse(self, activation: str, output) -> None:
        """Apply `activation` and write `output` (the activation operator's output, which
        the consumers read) instead of the operator's own output tensor."""
        old = self.outputs[0]
        self.set_activation(activation)
        for op in self.output_writers():
            op.outputs = [output if t is old else t for t in op.outputs]
        output.producer = self


def fusable(model, op, keep=()) -> bool:
    """Whether activation operator `op` can fold into its input's producer: an exact
    activation of one input that only `op` reads, made by an operator without one, and
    not among `keep` (tensors the caller reads, such as a module's outputs)."""
    from .elementwise import Elementwise
    if not (isinstance(op, Elementwise) and op.type in ACTIVATIONS and len(op.inputs) == 1
            and op.params.get("approximate", "none") == "none"):
        return False
    x = op.inputs[0]
    producer = x.producer
    return (isinstance(producer, FusesActivation) and producer.activation is None
            and producer.takes_activation() and producer.outputs == [x]
            and all(t is not x for t in keep) and model.consumers(x) == [op])


def fuse_activations(model, keep=()) -> list[str]:
    """Fold every fusable activation operator (see `fusable`) into its producer; returns
    the names of the operators removed. The activation's output tensor keeps its name, so
    consumers and readers of it see no change; the producer's own output tensor is gone."""
    removed = []
    for op in list(model.ops):
        if fusable(model, op, keep):
            x = op.inputs[0]
            x.producer.fuse(op.type, op.outputs[0])
            model.ops.remove(op)
            del model.tensors[x.name]
            removed.append(op.name)
    return removed
