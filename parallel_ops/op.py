"""Op: the declaration of a partitioned operator (one concept: how a part is computed).

An operator declares
  dims      its parallelizable dimensions, each a SOAP kind: "sample" (batch), "attribute"
            (a non-parameter output dim such as height, width or sequence), "parameter" (an
            output dim whose split also splits weights) or "reduction" (a weight's input dim;
            parts compute partial sums of the whole output, added by the runtime);
  labels    per input, weight and output tensor, which dim splits each axis (None = whole);
  forward   a plain PyTorch function computing one part from its input and weight parts.
From these, `part()` derives the rects each point reads and writes, and autograd on
`forward` gives backward (or the op's own, `explicit_backward`: conv2d, linear and the
activation operators). Ops the labels cannot express (halos of conv and pooling, bias used
by one reduction part) override `part()` only. Multi-launch operators (batch norm, softmax
over split classes) return several stage Ops from `stages()`.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

import torch

from taskrt.geometry import Rect
from taskrt.region import block_bounds

from .errors import OperatorError
from .tensor import Tensor, Weight

SAMPLE, ATTRIBUTE, PARAMETER, REDUCTION = "sample", "attribute", "parameter", "reduction"
KINDS = (SAMPLE, ATTRIBUTE, PARAMETER, REDUCTION)


@dataclass(frozen=True, slots=True)
class Dim:
    name: str
    kind: str
    extent: int          # its length
    whole: str = ""      # if set, why this dim must not be split (its degree stays 1)

    @property
    def max_degree(self) -> int:
        """The largest legal degree: the extent, or 1 for a dim that must stay whole."""
        return 1 if self.whole else self.extent

    def __str__(self) -> str:
        return f"{self.name}:{self.kind}"


@dataclass(frozen=True)
class PartSpec:
    """What one point task of an op reads and writes. An empty rect means "not used"."""
    inputs: tuple[Rect, ...]
    weights: tuple[Rect, ...]
    outputs: tuple[Rect, ...]
    partial: bool | tuple = False   # outputs are partial sums over a split reduction dim
    #                                 (a tuple gives it per output)
    info: Any = None                # op-specific facts for forward (e.g. padding of this part)


@dataclass(frozen=True, slots=True)
class PartWork:
    """The declared work of one part in one phase (Op.work): the FLOPs torch's formulas
    give for what its task function runs (parallel_ops.workshape), the kernels it
    dispatches, and which of the values it returns (one per WD/RW/Red+ requirement, in
    order) are zero contributions (`zeros`) or None (`nones`, written in place or not
    at all); the executor stores each other one, a kernel the cost model adds. `traffic`:
    the bytes its kernels read and write (for an op with `kernel_traffic`)."""
    flops: int
    kernels: int
    zeros: tuple = ()
    nones: tuple = ()
    traffic: int = 0


# What an operator's code computes: a built-in declaration (Op.work, Op.saved_state_bytes)
# describes the built-in versions of these, not a user's subclass's own.
_COMPUTING = ("forward", "forward_saving", "backward", "part")


def declaration_holds(op, name: str) -> bool:
    """Whether `op`'s declared `name` ("work" or "saved_state_bytes") describes the code it
    runs: no class of its own below the built-in ones (this package's) overrides a computing
    method without declaring `name` itself, and for a stage, the same of the operator that
    made it (its stages run that operator's methods). A user's subclass of a built-in operator
    with its own forward is counted and measured, never priced by its parent's formula."""
    for klass in type(op).__mro__:
        if klass.__module__.startswith(__package__ + "."):
            break
        if name in vars(klass):
            return True
        if any(m in vars(klass) for m in _COMPUTING):
            return False
    parent = getattr(op, "parent", None)
    return parent is None or declaration_holds(parent, name)


class Op:
    """Base class of every operator and stage. Subclasses set the attributes in __init__."""
    type = "op"
    differentiable = True           # backward by autograd on forward
    replicated = False              # points with equal output rects on one device run once,
    #                                 and equal rects on several devices are replicas
    explicit_backward = False       # forward_saving() and backward() give backward without
    #                                 autograd (for the parts forward_saving accepts)

    def __init__(self, name: str):
        self.name = name
        self.inputs: list[Tensor] = []
        self.weights: list[Weight] = []
        self.outputs: list[Tensor] = []
        self.dims: tuple[Dim, ...] = ()
        self.labels: dict[str, tuple] = {"inputs": (), "weights": (), "outputs": ()}
        self.params: dict[str, Any] = {}
        self.training = True
        self.parent: Op | None = None

    # -- declaration check ----------------------------------------------------------------
    def check_declaration(self) -> None:
        """Fail early, naming the op, when labels and dims disagree."""
        names = [d.name for d in self.dims]
        if len(set(names)) != len(names):
            raise OperatorError(f"{self.type} '{self.name}': duplicate dim names {names}.")
        for d in self.dims:
            if d.kind not in KINDS:
                raise OperatorError(f"{self.type} '{self.name}': dim '{d.name}' has unknown "
                                    f"kind '{d.kind}'; use one of {KINDS}.")
        if self.labels is None:          # a custom part() says everything
            return
        for group in ("inputs", "weights", "outputs"):
            tensors = getattr(self, group)
            labels = self.labels.get(group, ())
            if len(labels) != len(tensors):
                raise OperatorError(f"{self.type} '{self.name}': {len(labels)} label tuples "
                                    f"for {len(tensors)} {group}.")
            for t, lab in zip(tensors, labels):
                if len(lab) != t.ndim:
                    raise OperatorError(f"{self.type} '{self.name}': labels {lab} for {group} "
                                        f"'{t.name}' of rank {t.ndim}.")
                for l in lab:
                    if l is not None and l not in names:
                        raise OperatorError(f"{self.type} '{self.name}': label '{l}' of "
                                            f"'{t.name}' is not a declared dim {names}.")
        out_labels = {l for lab in self.labels.get("outputs", ()) for l in lab if l}
        for d in self.dims:
            if d.kind == REDUCTION and d.name in out_labels:
                raise OperatorError(f"{self.type} '{self.name}': reduction dim '{d.name}' "
                                    "labels an output axis; a reduction dim must not.")
            if d.kind != REDUCTION and self.outputs and d.name not in out_labels \
                    and type(self).part is Op.part and getattr(self, "_part", None) is None:
                raise OperatorError(f"{self.type} '{self.name}': dim '{d.name}' labels no "
                                    "output axis; declare it as a reduction dim or label it.")

    # -- partitioning -----------------------------------------------------------------------
    def ranges(self, degrees: Sequence[int], color: Sequence[int]) -> dict[str, tuple[int, int]]:
        """[lo, hi) of every dim for this color."""
        return {d.name: block_bounds(d.extent, g, c)
                for d, g, c in zip(self.dims, degrees, color)}

    @staticmethod
    def rect_for(shape, labels, ranges) -> Rect:
        """The rect of a tensor of `shape` whose axes carry `labels` for these dim ranges.
        A rect covering the whole tensor is the one shared Rect.from_shape(shape): the parts
        of a launch then share it (a replicated weight's 1,024 parts are one object, whose
        shape and hash are computed once)."""
        lo, hi = [], []
        for ext, lab in zip(shape, labels):
            a, b = ranges[lab] if lab is not None else (0, ext)
            lo.append(a)
            hi.append(b)
        hi = tuple(hi)
        if hi == shape and not any(lo):
            return Rect.from_shape(shape)
        return Rect(tuple(lo), hi)

    def part(self, degrees: Sequence[int], color: Sequence[int]) -> PartSpec:
        """Rects of one point task, derived from the labels."""
        rg = self.ranges(degrees, color)
        lab = self.labels
        partial = any(d.kind == REDUCTION and g > 1 for d, g in zip(self.dims, degrees))
        return PartSpec(
            tuple(self.rect_for(t.shape, l, rg) for t, l in zip(self.inputs, lab["inputs"])),
            tuple(self.rect_for(t.shape, l, rg) for t, l in zip(self.weights, lab["weights"])),
            tuple(self.rect_for(t.shape, l, rg) for t, l in zip(self.outputs, lab["outputs"])),
            partial)

    # -- computation ------------------------------------------------------------------------
    def forward(self, spec: PartSpec, inputs: list, weights: list) -> list[torch.Tensor]:
        """Compute the output parts from input and weight parts (None where a rect is empty)."""
        raise NotImplementedError(f"{self.type} '{self.name}' has no forward")

    def forward_saving(self, spec: PartSpec, inputs: list, weights: list):
        """With `explicit_backward`: (outputs, saved) computed without autograd, `saved`
        being what backward() needs; None for a part that needs autograd (its backward is
        then autograd's on forward). Saves the cost of recording and walking an autograd
        graph per part, which shows on small layers (docs/design.md)."""
        return None

    def backward(self, spec: PartSpec, saved, output_grads: list, need_inputs: tuple,
                 need_weights: tuple) -> tuple[list, list]:
        """With `explicit_backward`: (input gradients, weight gradients) of a part from what
        forward_saving saved and its output gradients (None where an output has none), as
        lists aligned with inputs and weights, a tensor wherever need_inputs/need_weights
        says so (None elsewhere). Must equal autograd's gradients of forward."""
        raise NotImplementedError(f"{self.type} '{self.name}' has no explicit backward")

    def work(self, phase: str, spec: PartSpec, plan) -> PartWork | None:
        """The work of one part in `phase` ("fwd" or "bwd") without running it, exactly
        what counting its task on meta tensors gives (strategy/costs/work.py; a test
        compares them), or None: then it is counted. `plan` is the part's
        parallel_ops.tasks._Plan (need_inputs, need_weights, kept outputs) and
        self.training the mode of the launch."""
        return None

    def saved_state_bytes(self, spec: PartSpec, input_grads: tuple,
                          weight_grads: tuple) -> int | None:
        """The bytes one forward part keeps for its backward besides its regions, without
        running it: exactly what parallel_ops.saved_state measures on meta tensors (a test
        compares them), or None: then it is measured. input_grads, weight_grads: per input
        and weight, whether its gradient is wanted (StageArgs); self.training is the
        launch's mode."""
        return None

    def reference(self, inputs: list, weights: list) -> list[torch.Tensor]:
        """Whole-tensor computation in plain PyTorch, the oracle for tests and reference runs."""
        raise NotImplementedError(f"{self.type} '{self.name}' has no reference")

    def init_weights(self, generator: torch.Generator) -> list[torch.Tensor]:
        """Initial values of self.weights, drawn as PyTorch's module would draw them."""
        return []

    def stages(self) -> list["Op"]:
        """The primitive launches this operator lowers to (itself, for single-launch ops)."""
        return [self]

    def output_partial(self, spec: PartSpec, index: int) -> bool:
        return spec.partial[index] if isinstance(spec.partial, tuple) else spec.partial

    @property
    def display_type(self) -> str:
        """The type as reports show it: with a fused activation, e.g. "conv2d+relu"."""
        activation = getattr(self, "activation", None)
        return f"{self.type}+{activation}" if activation else self.type

    @property
    def cost_tag(self) -> tuple:
        return (self.type, tuple(sorted((k, repr(v)) for k, v in self.params.items())))

    def state_info(self, info):
        """What of a part's `info` decides the state its forward keeps for backward
        (parallel_ops.saved_state caches per it): all of it unless an op says less."""
        return info

    def __str__(self) -> str:
        return f"{self.type} '{self.name}'"


class Stage(Op):
    """One launch of a multi-launch operator. It has the parent's dims (so the parent's
    config partitions it) but may give them other kinds, e.g. treat a split dim as a
    reduction because its output sums over it."""

    def __init__(self, parent: Op, tag: str, inputs, outputs, forward, weights=(),
                 labels=None, kinds: dict | None = None, part=None,
                 differentiable: bool = True, replicated: bool = False,
                 type: str | None = None, state_info=None, work=None, saved_state=None,
                 moved=None):
        super().__init__(f"{parent.name}/{tag}")
        self.parent = parent
        self.type = type or f"{parent.type}.{tag}"   # the cost-model key; equal work, equal type
        self.inputs, self.weights, self.outputs = list(inputs), list(weights), list(outputs)
        kinds = kinds or {}
        self.dims = tuple(replace(d, kind=kinds.get(d.name, d.kind)) for d in parent.dims)
        self.labels = labels
        self.params = parent.params
        self.differentiable = differentiable
        self.replicated = replicated
        self._forward = forward
        self._part = part
        self._state_info = state_info
        self._work = work
        self._saved_state = saved_state
        # (k, axis, delta, info): under every config, part() is that of the parent's stage k
        # with each input and output rect moved by delta along axis and `info` for info
        # (weights and partial the same): its launch templates are stage k's moved
        # (launch_template.py; an LSTM's steps, lstm.py). None: nothing declared.
        self.moved = moved

    def work(self, phase, spec, plan):
        return None if self._work is None else self._work(self, phase, spec, plan)

    def saved_state_bytes(self, spec, input_grads, weight_grads):
        return None if self._saved_state is None else \
            self._saved_state(self, spec, input_grads, weight_grads)

    def state_info(self, info):
        return info if self._state_info is None else self._state_info(info)

    def part(self, degrees, color) -> PartSpec:
        if self._part is not None:
            return self._part(self, degrees, color)
        return Op.part(self, degrees, color)

    def forward(self, spec, inputs, weights):
        return self._forward(spec, inputs, weights)
