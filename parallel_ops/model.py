"""Model: a graph of named operators and tensors, built by calls like model.conv2d(x, 64, 3).

Operators are added in program order, which is a topological order. Names are given or
made deterministically from the operator type ("conv2d_3"). Weights are drawn from the
model's seeded generator in the order their operators were added, as PyTorch's modules draw
them, so `torch.manual_seed(s)` plus the same torch.nn layers gives the same values. They
are drawn on first use of `initial_values` (InitialValues), not when an operator is added:
lowering, planning and simulation need shapes only, so a model of billions of parameters
can be simulated without allocating them.
Builder methods (conv2d, linear, ...) are attached by the operator modules via `builder`.
"""
from __future__ import annotations

from collections.abc import MutableMapping
from typing import Callable

import torch

from .errors import ShapeError
from .op import Op
from .tensor import Tensor, Weight


class Model:
    def __init__(self, name: str = "model", seed: int = 0, dtype: str = "float32"):
        self.name = name
        self.seed = seed
        self.dtype = dtype
        self.ops: list[Op] = []
        self.tensors: dict[str, Tensor] = {}
        self.inputs: list[Tensor] = []
        self.weights: list[Weight] = []
        self.generator = torch.Generator().manual_seed(seed)
        self.initial_values = InitialValues(self.generator)
        self.loss_op: Op | None = None
        self.step_count = 0     # iterations run so far (the trainer advances it; dropout
        #                         masks depend on it, so every rank advances it alike)
        self._counts: dict[str, int] = {}
        self.recompute: dict[str, int] = {}   # op name -> segment (parallel_ops/recompute.py)

    # -- naming ------------------------------------------------------------------------------
    def unique_name(self, base: str, given: str | None = None) -> str:
        if given is not None:
            if given in self.tensors or any(o.name == given for o in self.ops):
                raise ShapeError(f"Model '{self.name}': name '{given}' is already used. "
                                 "Pick another name or leave it out for an automatic one.")
            return given
        while True:
            k = self._counts.get(base, 0)
            self._counts[base] = k + 1
            name = f"{base}_{k}"
            if name not in self.tensors and all(o.name != name for o in self.ops):
                return name

    # -- building ----------------------------------------------------------------------------
    def input(self, name: str, shape, dtype: str | None = None,
              requires_grad: bool = False) -> Tensor:
        """A tensor fed at every step (data, labels)."""
        name = self.unique_name("input", name)
        t = Tensor(name, tuple(int(s) for s in shape), dtype or self.dtype,
                   requires_grad=requires_grad)
        self.tensors[name] = t
        self.inputs.append(t)
        return t

    def new_tensor(self, op: Op, shape, dtype: str | None = None, suffix: str = "") -> Tensor:
        name = op.name + suffix
        if name in self.tensors:
            raise ShapeError(f"{op.type} '{op.name}': tensor name '{name}' already exists.")
        requires = any(t.requires_grad for t in op.inputs + op.weights)
        t = Tensor(name, tuple(int(s) for s in shape), dtype or self.dtype, producer=op,
                   requires_grad=requires)
        self.tensors[name] = t
        op.outputs.append(t)
        return t

    def new_weight(self, op: Op, suffix: str, shape, trainable: bool = True) -> Weight:
        """A weight (trainable) or buffer (e.g. running statistics) owned by `op`."""
        name = f"{op.name}.{suffix}"
        w = Weight(name, tuple(int(s) for s in shape), self.dtype, requires_grad=trainable,
                   is_weight=True, owner=op)
        w.users.append(op)
        self.tensors[name] = w
        self.weights.append(w)
        op.weights.append(w)
        return w

    def share_weight(self, op: Op, weight: Weight) -> Weight:
        """Let `op` use an existing weight (e.g. LSTM steps); the first user partitions it."""
        weight.users.append(op)
        op.weights.append(weight)
        return weight

    def add_op(self, op: Op) -> Op:
        """Register a fully built op: checks its declaration and initializes its new weights."""
        for stage in op.stages():
            stage.check_declaration()
        for t in op.inputs:
            if self.tensors.get(t.name) is not t:
                raise ShapeError(f"{op.type} '{op.name}': input '{t.name}' does not belong to "
                                 f"model '{self.name}'.")
        self.initial_values.add(op)
        self.ops.append(op)
        return op

    def op(self, name: str) -> Op:
        for o in self.ops:
            if o.name == name:
                return o
        raise KeyError(f"Model '{self.name}' has no operator '{name}'; operators: "
                       f"{[o.name for o in self.ops][:12]}")

    def consumers(self, t: Tensor) -> list[Op]:
        return [o for o in self.ops for s in o.stages() if t in s.inputs]

    @property
    def num_parameters(self) -> int:
        n = 0
        for w in self.weights:
            k = 1
            for s in w.shape:
                k *= s
            n += k
        return n

    def summary(self) -> str:
        lines = [f"Model '{self.name}': {len(self.ops)} operators, {len(self.weights)} weights, "
                 f"{self.num_parameters} parameters"]
        for o in self.ops:
            outs = ", ".join(str(t) for t in o.outputs)
            lines.append(f"  {o.display_type:<12} {o.name:<20} -> {outs}")
        return "\n".join(lines)

    def compile(self, machine=None, strategy=None, optimizer=None, **kw):
        """Lower this model for `machine` under `strategy` and return a Trainer."""
        from .trainer import Trainer
        return Trainer(self, machine=machine, strategy=strategy, optimizer=optimizer, **kw)


def builder(fn: Callable) -> Callable:
    """Attach `fn(model, ...)` to Model as a method named like the function."""
    setattr(Model, fn.__name__, fn)
    return fn


class InitialValues(MutableMapping):
    """Weight name -> initial value. Operators' weights are drawn (Op.init_weights, from the
    model's generator, in the order the operators were added) on the first access of any
    value, so that building, lowering and simulating a model allocate no weights."""

    def __init__(self, generator: torch.Generator):
        self._generator = generator
        self._values: dict[str, torch.Tensor] = {}
        self._pending: list[Op] = []

    def add(self, op: Op) -> None:
        """Draw `op`'s new weights when values are first needed."""
        if any(w.owner is op for w in op.weights):
            self._pending.append(op)

    def _draw(self) -> dict[str, torch.Tensor]:
        pending, self._pending = self._pending, []
        for op in pending:
            new = [w for w in op.weights if w.owner is op]
            values = op.init_weights(self._generator)
            if len(values) != len(new):
                raise ShapeError(f"{op.type} '{op.name}': init_weights gave {len(values)} "
                                 f"tensors for {len(new)} new weights.")
            for w, v in zip(new, values):
                if tuple(v.shape) != w.shape:
                    raise ShapeError(f"{op.type} '{op.name}': initial value of '{w.name}' has "
                                     f"shape {tuple(v.shape)}, expected {w.shape}.")
                self._values[w.name] = v.to(getattr(torch, w.dtype)).contiguous()
        return self._values

    def __getitem__(self, name: str) -> torch.Tensor:
        return (self._draw() if self._pending else self._values)[name]

    def __setitem__(self, name: str, value: torch.Tensor) -> None:
        (self._draw() if self._pending else self._values)[name] = value

    def __delitem__(self, name: str) -> None:
        del (self._draw() if self._pending else self._values)[name]

    def __iter__(self):
        return iter(self._draw() if self._pending else self._values)

    def __len__(self) -> int:
        return len(self._draw() if self._pending else self._values)
