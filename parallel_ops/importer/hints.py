"""A short hint for each node the importer cannot convert: what a user can do about it.

Known patterns get a specific hint (random numbers in forward, data-dependent ordering,
scans); any other node gets the registration call that would cover it.
"""
from __future__ import annotations

import torch.fx as fx

from .registry import aten_name

_RANDOM = ("random numbers drawn in forward, or a tensor made to hold them (e.g. "
           "stochastic depth, timm's drop_path_rate > 0): build the model with that rate 0; "
           "nn.Dropout and F.dropout are supported (split-independent masks)")
_ORDER = ("a data-dependent order or selection: compute it outside the model, or write a "
          "custom operator that keeps this axis whole")
_SCAN = "a scan along an axis: write a custom operator that keeps this axis whole"
_DYNAMIC = "a result whose shape depends on the data: only static shapes are supported"

KNOWN: dict[str, str] = {
    **{k: _RANDOM for k in ("bernoulli", "bernoulli_", "rand", "rand_like", "randn",
                            "randn_like", "randint", "uniform_", "normal_", "multinomial",
                            "native_dropout", "new_empty", "empty_like")},
    **{k: _ORDER for k in ("sort", "argsort", "topk", "argmax", "argmin", "kthvalue",
                           "msort")},
    **{k: _SCAN for k in ("cumsum", "cumprod", "cummax", "cummin", "logcumsumexp")},
    **{k: _DYNAMIC for k in ("nonzero", "masked_select", "unique", "unique_consecutive")},
    "item": "a tensor value read in Python: keep it a tensor, or make it a constant",
    "einsum": "rewrite it with matmul, transpose and reshape, or write a custom operator",
}


def _name(node: fx.Node, root) -> tuple[str, str]:
    """(short name for KNOWN, the registration call that would cover the node)."""
    if node.op == "call_module":
        cls = type(root.get_submodule(node.target))
        return cls.__name__, f"@register_module({cls.__name__})"
    if node.op == "call_method":
        return str(node.target), f"@register_method('{node.target}')"
    name = aten_name(node.target)
    if name is not None:
        return name, f"@register_aten('{name}')"
    short = getattr(node.target, "__name__", str(node.target))
    mod = getattr(node.target, "__module__", "") or ""
    where = {"torch._C._nn": "F", "torch.nn.functional": "F", "torch._VariableFunctions": "torch",
             "_operator": "operator"}.get(mod, mod or "torch")
    return short, f"@register_function({where}.{short})"


def hint(node: fx.Node, root) -> str:
    """"no converter" and what to do about this node."""
    short, register = _name(node, root)
    known = KNOWN.get(short) or KNOWN.get(short.rstrip("_"))
    if known:
        return f"no converter; {known}"
    return f"no converter; write one ({register}, docs/importer.md)"
