"""What the CNN apps share: image flags, the image network, conv + batch norm + ReLU."""
from __future__ import annotations

import torch

from apps.common import Network, UsageError
from parallel_ops import Model

SMALL_WIDTH_DIVISOR = 8        # --small divides every channel count by this


def add_image_arguments(parser, full_size: int, small_size: int) -> None:
    parser.add_argument("--classes", type=int, default=None, metavar="N",
                        help="output classes (default 1000, 10 with --small or --data digits)")
    parser.add_argument("--image-size", type=int, default=None, metavar="PIXELS",
                        help=f"input height and width (default {full_size}, {small_size} "
                             "with --small)")


def image_sizes(a, full_size: int, small_size: int, min_size: int) -> tuple[int, int, int]:
    """(classes, image size, channel divisor) in force."""
    classes = a.classes if getattr(a, "classes", None) else (10 if a.small else 1000)
    size = a.image_size or (small_size if a.small else full_size)
    if size < min_size:
        raise UsageError(f"--image-size {size}: this network needs at least {min_size} "
                         "pixels (its strided layers would leave nothing to pool).")
    if classes < 2:
        raise UsageError(f"--classes {classes}: use at least 2 classes.")
    return classes, size, (SMALL_WIDTH_DIVISOR if a.small else 1)


def image_model(name: str, a, size: int) -> tuple[Model, object, object]:
    m = Model(name, seed=a.seed, dtype=a.dtype)
    images = m.input("images", (a.batch_size, 3, size, size))
    labels = m.input("labels", (a.batch_size,), dtype="int64")
    return m, images, labels


class ImageNetwork(Network):
    """Synthetic images with a learnable rule: noise plus a per-image colour offset, and
    the label is a fixed random linear function of the offset (argmax over classes), so
    the loss falls as a network learns it. Deterministic by seed and iteration."""

    def synthetic(self, seed, iteration):
        images = self.model.tensors[self.image]
        n, c = images.shape[:2]
        classes = self.int_ranges[self.labels]
        g = torch.Generator().manual_seed(seed * 1_000_003 + iteration)
        dtype = getattr(torch, images.dtype)
        offset = torch.randn(n, c, generator=g, dtype=torch.float64)
        x = torch.randn(images.shape, generator=g, dtype=torch.float64) + offset[:, :, None, None]
        teacher = torch.randn(c, classes, generator=torch.Generator().manual_seed(seed + 77),
                              dtype=torch.float64)
        return {self.image: x.to(dtype), self.labels: (offset @ teacher).argmax(1)}


def image_network(m: Model, logits, labels, classes: int) -> Network:
    m.softmax_cross_entropy(logits, labels, name="loss")
    return ImageNetwork(m, {"labels": classes}, logits=logits.name, image="images",
                        labels="labels")


def conv_bn(m: Model, x, out_channels: int, kernel_size, name: str, stride=1, padding=0,
            eps: float = 1e-5, relu: bool = True):
    """Conv2d without bias, BatchNorm2d, then ReLU (torchvision's BasicConv2d / ResNet's);
    the ReLU is fused into the batch norm's launch (parallel_ops/activation.py)."""
    x = m.conv2d(x, out_channels, kernel_size, stride=stride, padding=padding, bias=False,
                 name=f"{name}/conv")
    return m.batchnorm2d(x, eps=eps, name=f"{name}/bn", activation="relu" if relu else None)
