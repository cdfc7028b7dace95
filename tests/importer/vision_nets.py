"""Vision models for the importer tests: timm's own classes where timm can be imported,
and the same blocks in plain torch (examples/vision_blocks.py) everywhere; strategies
derived from an imported model's operators.

timm 1.0.29 imports torchvision; the only torchvision for torch 2.13 (0.28.0) is a CUDA
build whose C++ ops need CUDA libraries, so on a CPU-only torch its import fails and the
timm cases skip with that reason (docs/importer.md).
"""
from __future__ import annotations

import torch

from examples import vision_blocks as vb
from parallel_ops import ParallelConfig


def _timm():
    try:
        import timm
        return timm, None
    except ModuleNotFoundError as e:
        if e.name not in ("timm", "torchvision"):
            raise
        return None, ("timm is not installed (pip install -e '.[timm]', with a CUDA build "
                      "of torch 2.13 only: see docs/importer.md). The same blocks run as "
                      "plain-torch models.")
    except RuntimeError as e:    # torchvision's C++ ops without CUDA libraries
        first = str(e).splitlines()[0] if str(e) else ""
        return None, (f"timm cannot be imported here (RuntimeError: {first}); timm imports "
                      "torchvision, whose wheel for torch 2.13 needs CUDA libraries (see "
                      "docs/importer.md). The same blocks run as plain-torch models.")


TIMM, TIMM_SKIP = _timm()
MODELS = ("resnet", "vit", "convnext", "mobilenetv2")
SOURCES = ("torch", "timm")


def _timm_model(name):
    if name == "resnet":
        from timm.models.resnet import BasicBlock, ResNet
        return ResNet(BasicBlock, [1, 1, 1, 1], num_classes=5), (4, 3, 32, 32)
    if name == "vit":
        from timm.models.vision_transformer import VisionTransformer
        return VisionTransformer(img_size=16, patch_size=4, embed_dim=16, depth=2, num_heads=2,
                                 num_classes=5), (2, 3, 16, 16)
    if name == "convnext":
        from timm.models.convnext import ConvNeXt
        return ConvNeXt(depths=(1, 1, 1, 1), dims=(8, 16, 24, 32), num_classes=5), \
            (2, 3, 32, 32)
    return TIMM.create_model("mobilenetv2_035", num_classes=5), (4, 3, 64, 64)


def _torch_model(name):
    if name == "resnet":
        return vb.ResNet((1, 1, 1, 1), (8, 16, 24, 32), num_classes=5), (4, 3, 32, 32)
    if name == "vit":
        return vb.VisionTransformer(16, 4, 16, 2, 2, num_classes=5), (2, 3, 16, 16)
    if name == "convnext":
        return vb.ConvNeXt(num_classes=5), (2, 3, 32, 32)
    return vb.MobileNetV2(num_classes=5), (4, 3, 32, 32)


def build(name: str, source: str = "torch", dtype=torch.float64):
    """(module, (images,), labels) with fixed seeds, random init."""
    torch.manual_seed(11)
    net, shape = (_timm_model if source == "timm" else _torch_model)(name)
    g = torch.Generator().manual_seed(12)
    x = torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)
    return net.to(dtype), (x,), torch.randint(0, 5, (shape[0],), generator=g)


# Per strategy, per operator type: the dims to split in two, first that the op allows.
# "parameter" splits channels, features and heads; "attribute" splits images, sequences
# and reduction dims (partial sums); both put neighbours on different device pairs.
_SPLITS = {
    "parameter": {"conv2d": ("c",), "batchnorm2d": ("c",), "linear": ("o",),
                  "layernorm": ("f",), "sdpa": ("h",), "max_pool2d": ("c",),
                  "adaptive_avg_pool2d": ("c",), "expand": ("a2",), "multiply": ("a1",),
                  "add": ("a1",), "relu6": ("a1",), "concat": ("a2",)},
    "attribute": {"conv2d": ("ci", "h"), "batchnorm2d": ("h", "n"), "linear": ("i", "s1"),
                  "layernorm": ("s1",), "sdpa": ("s",), "max_pool2d": ("w",),
                  "transpose": ("a1",), "expand": ("n",), "add": ("a2", "n"),
                  "concat": ("a1",), "split": ("a1",)},
}
STRATEGIES = ("data_parallel",) + tuple(_SPLITS)


def strategy(model, kind: str, devices: list[int]) -> dict[str, ParallelConfig]:
    """A strategy over `model`'s operators: {} (data parallel), or each operator of a type
    in _SPLITS[kind] split in two on the first allowed dim, alternating between the first
    two devices and the last two (reversed)."""
    if kind == "data_parallel":
        return {}
    out = {}
    pairs = (devices[:2], devices[::-1][:2])
    for k, op in enumerate(model.ops):
        dims = {d.name: d for d in op.dims}
        for name in _SPLITS[kind].get(op.type, ()):
            d = dims.get(name)
            if d is not None and d.max_degree >= 2:
                out[op.name] = ParallelConfig.of(pairs[k % 2], **{name: 2})
                break
    return out
