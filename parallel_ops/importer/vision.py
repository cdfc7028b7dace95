"""Converters that vision models (timm's ResNet, ViT, ConvNeXt, MobileNetV2; torchvision's
MobileNetV2) need beyond functions.py and modules.py:

  x.expand_as(y)                  expand (x.expand is in functions.py)
  unbind                          split + reshape (ViT's q, k, v = qkv.unbind(0))
  ReLU6, F.relu6, Hardtanh        relu6 (fuses into its producer), hardtanh
  clamp, clamp_min, clamp_max     clamp
  F.batch_norm                    batchnorm2d (timm's BatchNormAct2d calls it itself)
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import convert as fn
from .registry import register_aten, register_function, register_method, register_module
from .values import Unsupported


register_method("expand_as")(lambda ctx, x, other: fn.expand(ctx, x, ctx.tensor(other).shape))


def unbind(ctx, x, dim=0) -> list:
    """The slices of x along `dim`, that axis dropped (torch.unbind)."""
    x = ctx.tensor(x)
    d = fn.axis(dim, x.ndim)
    parts = fn.split(ctx, x, 1, d)
    shape = x.shape[:d] + x.shape[d + 1:]
    return [fn.reshape(ctx, p, shape) for p in parts]


register_method("unbind")(unbind)
register_function(torch.unbind)(unbind)
register_aten("unbind")(unbind)


def hardtanh(ctx, x, min_val=-1.0, max_val=1.0, inplace=False):
    x = ctx.tensor(x)
    if (min_val, max_val) == (0.0, 6.0):
        return ctx.model.relu6(x, name=ctx.op_name())
    return ctx.model.hardtanh(x, float(min_val), float(max_val), name=ctx.op_name())


def clamp(ctx, x, min=None, max=None):
    lo, hi = (None if v is None else fn.scalar_value(v) for v in (min, max))
    if (min is not None and lo is None) or (max is not None and hi is None):
        raise Unsupported("clamp with tensor bounds (only numbers are supported)")
    return ctx.model.clamp(ctx.tensor(x), lo, hi, name=ctx.op_name())


register_module(nn.ReLU6)(lambda ctx, m, x: hardtanh(ctx, x, 0.0, 6.0))
register_module(nn.Hardtanh)(lambda ctx, m, x: hardtanh(ctx, x, m.min_val, m.max_val))
register_function(F.relu6)(lambda ctx, x, inplace=False: hardtanh(ctx, x, 0.0, 6.0))
register_function(F.hardtanh)(hardtanh)
register_aten("hardtanh", "hardtanh_")(hardtanh)
register_aten("relu6")(lambda ctx, x: hardtanh(ctx, x, 0.0, 6.0))
register_function(torch.clamp, torch.clip)(clamp)
register_method("clamp", "clamp_", "clip")(clamp)
register_aten("clamp", "clamp_", "clip")(clamp)
register_method("clamp_min", "clamp_min_")(lambda ctx, x, m: clamp(ctx, x, m, None))
register_method("clamp_max", "clamp_max_")(lambda ctx, x, m: clamp(ctx, x, None, m))
register_aten("clamp_min", "clamp_min_")(lambda ctx, x, m: clamp(ctx, x, m, None))
register_aten("clamp_max", "clamp_max_")(lambda ctx, x, m: clamp(ctx, x, None, m))


@register_function(F.batch_norm)
def batch_norm(ctx, x, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    if running_mean is None or running_var is None:
        raise Unsupported("batch norm without running statistics (track_running_stats=False)")
    return fn.batch_norm(ctx, x, running_mean, running_var, weight, bias, training, momentum,
                         eps)

