"""Reshapes the import leaves out: the operator they feed equals itself on the tensor before
the reshape, so the reshape would be a task (and its backward another) that only moves a
view.

  leading axes into a linear   HF's Conv1D (GPT-2) computes x.view(-1, E), addmm with its
                               weight, and views the product back to x's leading axes. The
                               linear operator takes any leading axes and flattens a
                               contiguous input to the same 2-d product (parallel_ops/
                               linear.py), so it reads x itself and its output has x's leading
                               axes; the reshape back is then the identity. Values are
                               bit-equal: the same matrix products on the same 2-d views.

A fold needs the exact graph around the reshape, read from the torch.fx node being converted:
the reshape merges every leading axis of x (keeping the last), its only user is the linear
product (as the activation operand, with a 2-d parameter as the weight), and every user of
that product only reshapes it (a reshape of the same elements in the same order gives the
same tensor whatever the shape it starts from). Anything else keeps the reshape.
"""
from __future__ import annotations

import math
import operator

import torch
import torch.nn.functional as F
from torch import fx

from .registry import aten_name
from .values import Param

# aten / torch.fx linear products: the position of the activation operand and of the weight
_LINEAR = {"addmm": (1, 2), "mm": (0, 1), "matmul": (0, 1), "linear": (0, 1)}
_FX_LINEAR = {torch.addmm: "addmm", torch.mm: "mm", torch.matmul: "mm", operator.matmul: "mm",
              F.linear: "linear"}
_RESHAPES = {"view", "reshape", "_unsafe_view"}
_FX_RESHAPES = {torch.reshape: "reshape"}


def _kind(node: fx.Node) -> str | None:
    """'view'/'reshape'/'_unsafe_view', 'addmm'/'mm'/'linear', or None for any other node."""
    if node.op == "call_function":
        name = aten_name(node.target)
        if name is not None:
            return name if name in _RESHAPES or name in _LINEAR else None
        return _FX_LINEAR.get(node.target) or _FX_RESHAPES.get(node.target)
    if node.op == "call_method" and node.target in ("view", "reshape", "matmul", "mm"):
        return "mm" if node.target in ("matmul", "mm") else node.target
    return None


def into_linear(ctx, x, shape: tuple) -> bool:
    """Whether the reshape of `x` to `shape` that ctx is converting can be left out: the
    linear it feeds reads `x` instead (see the module's docstring)."""
    node = getattr(ctx, "node", None)
    if node is None or x.ndim < 3 or shape != (math.prod(x.shape[:-1]), x.shape[-1]) \
            or _kind(node) not in _RESHAPES or not node.args \
            or not isinstance(node.args[0], fx.Node) or ctx.values.get(node.args[0].name) is not x:
        return False
    users = list(node.users)
    if len(users) != 1:
        return False
    user = users[0]
    kind = _kind(user)
    if kind not in _LINEAR or user.kwargs:
        return False
    act, weight = _LINEAR[kind]
    if len(user.args) <= weight or user.args[act] is not node or node in (
            a for k, a in enumerate(user.args) if k != act):
        return False
    if not _matrix_parameter(ctx, user.args[weight]):
        return False
    return bool(user.users) and all(_kind(u) in _RESHAPES and u.args[0] is user
                                    and user not in u.args[1:] for u in user.users)


def _matrix_parameter(ctx, w) -> bool:
    """Whether graph value `w` is a 2-d parameter of the module (torch.fx places a get_attr
    just before its first use, so it may not be converted yet)."""
    if not isinstance(w, fx.Node):
        return False
    value = ctx.values.get(w.name)
    if value is None and w.op == "get_attr":
        try:
            value = ctx.cap.root.get_parameter(str(w.target))
        except AttributeError:
            return False
        return value.ndim == 2
    return isinstance(value, Param) and value.value.ndim == 2
