"""What the importer does for Hugging Face transformers models, found by duck typing
(transformers is never imported here):

- A KV cache is for generation: a forward that takes `use_cache` is called with
  use_cache=False unless the caller gives it (torch.export cannot return a DynamicCache,
  and training never reads it).
- RMSNorm modules (LlamaRMSNorm, MistralRMSNorm, Qwen2RMSNorm, torch.nn.RMSNorm, ...)
  become one `rmsnorm` operator. A module qualifies when its class name ends in "RMSNorm",
  it has a 1-d `weight` and an epsilon, and on a random probe it returns exactly what
  parallel_ops.rmsnorm.rms_norm returns (computing in float32, as HF does, or in the
  input's dtype); anything else is converted node by node.
"""
from __future__ import annotations

import inspect

import torch

from .registry import MODULES, register_module


def call_kwargs(module: torch.nn.Module, kwargs: dict) -> dict:
    """The keyword arguments to capture with: use_cache=False added where it applies."""
    try:
        params = inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return kwargs
    if "use_cache" in params and "use_cache" not in kwargs:
        return {**kwargs, "use_cache": False}
    return kwargs


def _epsilon(m: torch.nn.Module):
    for attr in ("variance_epsilon", "eps", "epsilon"):
        v = getattr(m, attr, None)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return None


def _rmsnorm_compute_dtype(m: torch.nn.Module):
    """'float32' or None (the input's dtype) if `m` is an RMSNorm we compute exactly, or
    False."""
    from ..rmsnorm import rms_norm
    w = getattr(m, "weight", None)
    eps = _epsilon(m)
    if not type(m).__name__.endswith("RMSNorm") or not isinstance(w, torch.nn.Parameter) \
            or w.ndim != 1 or eps is None or list(m.children()):
        return False
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, w.shape[0], generator=g, dtype=w.dtype) * 3
    with torch.no_grad():
        try:
            want = m(x)
        except Exception:
            return False
        for compute in ("float32", None):
            if torch.equal(rms_norm(x, w, eps, compute), want):
                return compute
    return False


def register_modules(module: torch.nn.Module) -> None:
    """Register converters for the RMSNorm classes used inside `module`."""
    seen = set()
    for m in module.modules():
        cls = type(m)
        if cls in seen or cls in MODULES:
            continue
        seen.add(cls)
        compute = _rmsnorm_compute_dtype(m)
        if compute is not False:
            register_module(cls, grouped=True)(_rmsnorm_converter(compute))


def _rmsnorm_converter(compute_dtype):
    def convert(ctx, m, x, *rest):
        from .values import Unsupported
        if rest:
            raise Unsupported(f"{type(m).__name__} called with {len(rest) + 1} operands")
        x = ctx.tensor(x)
        y = ctx.model.rmsnorm(x, _epsilon(m), True, compute_dtype, name=ctx.op_name())
        ctx.bind(y.producer, [(ctx.module_param(m, "weight"), None)])
        return y
    return convert
