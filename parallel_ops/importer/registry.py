"""Converter registries: per nn.Module type, function, Tensor method and ATen operator."""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx as fx

MODULES: dict[type, Callable] = {}      # nn.Module type -> converter(ctx, module, *args)
FUNCTIONS: dict[Any, Callable] = {}     # python/torch callable -> converter(ctx, *args)
METHODS: dict[str, Callable] = {}       # Tensor method name -> converter(ctx, self, *args)
ATEN: dict[str, Callable] = {}          # ATen op name ("linear") -> converter(ctx, *args)
GROUPED: set[type] = set()              # module types export decomposes; regrouped


def _register(table: dict, keys):
    def deco(fn):
        for k in keys:
            table[k] = fn
        return fn
    return deco


def register_module(*types, grouped: bool = False):
    """Decorator: convert calls of these nn.Module types (torch.fx keeps them whole).
    `grouped`: under torch.export too, the ATen nodes recorded inside one call are replaced
    by one converter call, with ctx.grouped set and as arguments the values those nodes
    read from outside the module (its own parameters left out), in order of first use."""
    if grouped:
        GROUPED.update(types)
    return _register(MODULES, types)


def register_function(*targets):
    """Decorator: convert calls of these functions (torch.add, F.relu, operator.add...)."""
    return _register(FUNCTIONS, targets)


def register_method(*names):
    """Decorator: convert these Tensor methods (x.view(...), x.softmax(...))."""
    return _register(METHODS, names)


def register_aten(*names):
    """Decorator: convert these ATen operators (by name without overload: 'linear')."""
    return _register(ATEN, names)


def module_converter(m: torch.nn.Module):
    """The converter of m's type or of the nearest base class that has one, unless a class
    between them redefines forward (timm's BatchNormAct2d is a BatchNorm2d that also
    applies an activation; LayerNorm2d normalizes channels): that call is traced through."""
    for cls in type(m).__mro__:
        if cls in MODULES:
            return MODULES[cls]
        if "forward" in vars(cls):
            return None
    return None


def aten_name(target) -> str | None:
    if isinstance(target, torch._ops.OpOverload):
        return target._schema.name.split("::", 1)[1]
    if isinstance(target, torch._ops.OpOverloadPacket):
        return target._qualified_op_name.split("::", 1)[1]
    return None


def describe_target(node: fx.Node, root: torch.nn.Module) -> str:
    if node.op == "call_module":
        m = root.get_submodule(node.target)
        return f"{type(m).__module__}.{type(m).__qualname__}"
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    t = node.target
    name = aten_name(t)
    if name is not None:
        return f"torch.ops.aten.{name}"
    short = getattr(t, "__name__", None)
    for prefix, space in (("torch", torch), ("torch.nn.functional", torch.nn.functional)):
        if short and getattr(space, short, None) is t:
            return f"{prefix}.{short}"
    mod = getattr(t, "__module__", None) or ""
    qual = getattr(t, "__qualname__", None) or short or str(t)
    if mod in ("_operator", "operator"):
        mod = "operator"
    return f"{mod}.{qual}" if mod else qual
