"""The values an import walk gives graph nodes, and how it reports unsupported ones.

  Tensor        a model tensor (the output of an operator, or a model input);
  Param         a parameter or buffer of the module not yet owned by an operator;
  Stacked       per-layer tensors torch returns stacked (LSTM's h_n, c_n);
  Poison        the node depends on an unsupported node (reported once, at the root);
  Derived       a tensor computed without gradients from integer/bool model inputs (an
                attention mask from `attention_mask`, labels shifted with `pad`): a function
                of the inputs' values, run by an `input_function` operator where it is read;
  anything else a constant: shapes, ints, dtypes, constant tensors.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..tensor import Tensor


class Unsupported(Exception):
    """Raised by a converter: this node cannot be mapped (the message says why)."""


@dataclass
class Param:
    key: str                     # state-dict key ("blocks.0.attn.in_proj_weight")
    value: torch.Tensor          # the module's tensor itself
    trainable: bool
    transposed: bool = False     # the code uses value.t() (a 2-d parameter)

    @property
    def view(self) -> torch.Tensor:
        """The value as the code sees it."""
        return self.value.t() if self.transposed else self.value


@dataclass
class Stacked:
    """Tensors torch would return stacked on a new first axis (LSTM h_n of each layer)."""
    items: list


@dataclass(eq=False)
class Derived:
    """fn(*values of sources) is the value; example is its value at the example inputs."""
    sources: tuple                      # model input Tensors (integer or bool)
    fn: Callable
    example: torch.Tensor

    @property
    def shape(self):
        return tuple(self.example.shape)


@dataclass
class Poison:
    cause: str


@dataclass
class Problem:
    node: str
    kind: str
    target: str
    where: str
    module: str
    reason: str

    def __str__(self) -> str:
        mod = f" in module '{self.module}'" if self.module else ""
        return (f"  - node '{self.node}': {self.kind} {self.target}{mod} at {self.where}: "
                f"{self.reason}")


def walk_values(value, fn):
    """Apply fn to every leaf of nested lists, tuples, dicts and slices."""
    if isinstance(value, (list, tuple)):
        out = [walk_values(v, fn) for v in value]
        if hasattr(value, "_fields"):                  # a namedtuple
            return type(value)(*out)
        return type(value)(out) if isinstance(value, tuple) else out
    if isinstance(value, dict):
        return {k: walk_values(v, fn) for k, v in value.items()}
    if isinstance(value, slice):
        return slice(*(walk_values(v, fn) for v in (value.start, value.stop, value.step)))
    return fn(value)


def any_value(value, pred) -> bool:
    found = []

    def visit(v):
        if pred(v):
            found.append(v)
        return v
    walk_values(value, visit)
    return bool(found)


SHAPE_ATTRS = {"shape", "dtype", "device", "ndim", "is_cuda", "requires_grad"}
SHAPE_METHODS = {"size", "dim", "numel", "ndimension", "get_device"}


class MetaTensor:
    """A stand-in for a model Tensor in shape queries (x.shape, x.size(1), x.dtype)."""

    def __init__(self, t: Tensor):
        self.shape = torch.Size(t.shape)
        self.dtype = getattr(torch, t.dtype)
        self.device = torch.device("cpu")
        self.ndim = len(t.shape)
        self.is_cuda = False
        self.requires_grad = t.requires_grad

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self):
        return self.ndim

    ndimension = dim

    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def get_device(self):
        return -1


def format_problems(module: torch.nn.Module, method: str, problems: list[Problem]) -> str:
    lines = [f"import of {type(module).__name__} ({method}): {len(problems)} operation"
             f"{'s' if len(problems) != 1 else ''} ha{'ve' if len(problems) != 1 else 's'} "
             "no parallel operator:"]
    lines += [str(p) for p in problems]
    lines.append("How to fix: express each as a custom partitioned operator (an Op with dims, "
                 "labels and a torch function for one part; see docs/custom_ops.md) and "
                 "register a converter for it: parallel_ops.importer.register_module(Type), "
                 "register_function(fn), register_method('name') or register_aten('op') "
                 "(see docs/importer.md); or rewrite that code with supported layers.")
    return "\n".join(lines)
