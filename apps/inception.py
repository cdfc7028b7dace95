"""Inception-v3 as torchvision defines it, without the auxiliary classifier (23,834,568
parameters at 1000 classes): a stem of five BasicConv2d (conv without bias, batch norm with
eps 0.001, ReLU) and two max pools, then the inception modules 3 x A (Mixed_5b..5d), B
(Mixed_6a), 4 x C (Mixed_6b..6e), D (Mixed_7a) and 2 x E (Mixed_7b, 7c), global average
pooling, dropout and a fully connected classifier; 299x299 images.

    mpirun -np 2 python -m mpi4py apps/inception.py --small               # 2 CPU ranks
    mpirun -np 4 python -m mpi4py apps/inception.py                       # 4 GPUs, 1 per rank
    python apps/inception.py --small --devices-per-rank 2 --export inception.json

Full size: 299x299 images, 1000 classes, per-device batch 64. --small: every channel count
divided by 8, 75x75 images (the smallest the strided layers allow), 10 classes, the same
94 convolutions and module structure. Operators are named like torchvision's modules:
`Mixed_5b/branch5x5_2/conv`, `Mixed_5b/branch5x5_2/bn`, `Mixed_5b/concat`, `fc`.
"""
from __future__ import annotations

from apps.scriptgc import exit_frozen, imports_paused

with imports_paused():                 # (torch's and our objects: apps/scriptgc.py)
    from apps.cnn import (add_image_arguments, conv_bn, image_model, image_network,
                          image_sizes)
    from apps.common import App, Network, P, main
    from parallel_ops import Model

EPS = 0.001


class _Block:
    """Builds one module's layers with torchvision's names and the width divisor."""

    def __init__(self, m: Model, name: str, div: int):
        self.m, self.name, self.div = m, name, div

    def conv(self, x, out: int, kernel, branch: str, stride=1, padding=0):
        return conv_bn(self.m, x, out // self.div, kernel, f"{self.name}/{branch}",
                       stride=stride, padding=padding, eps=EPS)

    def avg_pool(self, x, branch: str):
        return self.m.avg_pool2d(x, 3, stride=1, padding=1, name=f"{self.name}/{branch}_avgpool")

    def max_pool(self, x):
        return self.m.max_pool2d(x, 3, stride=2, name=f"{self.name}/branch_maxpool")

    def concat(self, xs, suffix: str = "concat"):
        return self.m.concat(xs, 1, name=f"{self.name}/{suffix}")


def inception_a(m, x, name, pool_features, div):
    b = _Block(m, name, div)
    b1 = b.conv(x, 64, 1, "branch1x1")
    b5 = b.conv(b.conv(x, 48, 1, "branch5x5_1"), 64, 5, "branch5x5_2", padding=2)
    d = b.conv(x, 64, 1, "branch3x3dbl_1")
    d = b.conv(d, 96, 3, "branch3x3dbl_2", padding=1)
    d = b.conv(d, 96, 3, "branch3x3dbl_3", padding=1)
    p = b.conv(b.avg_pool(x, "branch_pool"), pool_features, 1, "branch_pool")
    return b.concat([b1, b5, d, p])


def inception_b(m, x, name, div):
    b = _Block(m, name, div)
    b3 = b.conv(x, 384, 3, "branch3x3", stride=2)
    d = b.conv(x, 64, 1, "branch3x3dbl_1")
    d = b.conv(d, 96, 3, "branch3x3dbl_2", padding=1)
    d = b.conv(d, 96, 3, "branch3x3dbl_3", stride=2)
    return b.concat([b3, d, b.max_pool(x)])


def inception_c(m, x, name, c7, div):
    b = _Block(m, name, div)
    b1 = b.conv(x, 192, 1, "branch1x1")
    s = b.conv(x, c7, 1, "branch7x7_1")
    s = b.conv(s, c7, (1, 7), "branch7x7_2", padding=(0, 3))
    s = b.conv(s, 192, (7, 1), "branch7x7_3", padding=(3, 0))
    d = b.conv(x, c7, 1, "branch7x7dbl_1")
    d = b.conv(d, c7, (7, 1), "branch7x7dbl_2", padding=(3, 0))
    d = b.conv(d, c7, (1, 7), "branch7x7dbl_3", padding=(0, 3))
    d = b.conv(d, c7, (7, 1), "branch7x7dbl_4", padding=(3, 0))
    d = b.conv(d, 192, (1, 7), "branch7x7dbl_5", padding=(0, 3))
    p = b.conv(b.avg_pool(x, "branch_pool"), 192, 1, "branch_pool")
    return b.concat([b1, s, d, p])


def inception_d(m, x, name, div):
    b = _Block(m, name, div)
    t = b.conv(b.conv(x, 192, 1, "branch3x3_1"), 320, 3, "branch3x3_2", stride=2)
    s = b.conv(x, 192, 1, "branch7x7x3_1")
    s = b.conv(s, 192, (1, 7), "branch7x7x3_2", padding=(0, 3))
    s = b.conv(s, 192, (7, 1), "branch7x7x3_3", padding=(3, 0))
    s = b.conv(s, 192, 3, "branch7x7x3_4", stride=2)
    return b.concat([t, s, b.max_pool(x)])


def inception_e(m, x, name, div):
    b = _Block(m, name, div)
    b1 = b.conv(x, 320, 1, "branch1x1")
    t = b.conv(x, 384, 1, "branch3x3_1")
    t = b.concat([b.conv(t, 384, (1, 3), "branch3x3_2a", padding=(0, 1)),
                  b.conv(t, 384, (3, 1), "branch3x3_2b", padding=(1, 0))], "branch3x3_concat")
    d = b.conv(x, 448, 1, "branch3x3dbl_1")
    d = b.conv(d, 384, 3, "branch3x3dbl_2", padding=1)
    d = b.concat([b.conv(d, 384, (1, 3), "branch3x3dbl_3a", padding=(0, 1)),
                  b.conv(d, 384, (3, 1), "branch3x3dbl_3b", padding=(1, 0))],
                 "branch3x3dbl_concat")
    p = b.conv(b.avg_pool(x, "branch_pool"), 192, 1, "branch_pool")
    return b.concat([b1, t, d, p])


def build(a) -> Network:
    classes, size, div = image_sizes(a, 299, 75, 75)
    m, x, labels = image_model("inception_v3", a, size)
    x = conv_bn(m, x, 32 // div, 3, "Conv2d_1a_3x3", stride=2, eps=EPS)
    x = conv_bn(m, x, 32 // div, 3, "Conv2d_2a_3x3", eps=EPS)
    x = conv_bn(m, x, 64 // div, 3, "Conv2d_2b_3x3", padding=1, eps=EPS)
    x = m.max_pool2d(x, 3, stride=2, name="maxpool1")
    x = conv_bn(m, x, 80 // div, 1, "Conv2d_3b_1x1", eps=EPS)
    x = conv_bn(m, x, 192 // div, 3, "Conv2d_4a_3x3", eps=EPS)
    x = m.max_pool2d(x, 3, stride=2, name="maxpool2")
    x = inception_a(m, x, "Mixed_5b", 32, div)
    x = inception_a(m, x, "Mixed_5c", 64, div)
    x = inception_a(m, x, "Mixed_5d", 64, div)
    x = inception_b(m, x, "Mixed_6a", div)
    for name, c7 in (("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)):
        x = inception_c(m, x, name, c7, div)
    x = inception_d(m, x, "Mixed_7a", div)
    x = inception_e(m, x, "Mixed_7b", div)
    x = inception_e(m, x, "Mixed_7c", div)
    x = m.adaptive_avg_pool2d(x, 1, name="avgpool")
    x = m.flat(m.dropout(x, 0.5, name="dropout"), name="flat")
    logits = m.linear(x, classes, name="fc")
    return image_network(m, logits, labels, classes)


def mixed_strategy(model: Model, n: int) -> dict:
    """Operation parallelism inside Mixed_5b (its four branches alternate between devices,
    so they run at the same time) and the concat split on the batch; the stem's first
    convolution split on image rows (attribute); Mixed_7c's 1x1 branch on output channels
    (parameter); the classifier on its outputs and the loss on classes."""
    devs = list(range(n))
    out = {"Conv2d_1a_3x3/conv": P(devs, h=n), "Conv2d_1a_3x3/bn": P(devs, c=n)}
    branches = ("branch1x1", "branch5x5", "branch3x3dbl", "branch_pool")
    for op in model.ops:
        if op.name.startswith("Mixed_5b/") and op.name != "Mixed_5b/concat":
            k = next(i for i, b in enumerate(branches) if op.name[9:].startswith(b))
            out[op.name] = P([k % n])
    out["Mixed_5b/concat"] = P(devs, n=n)
    out["Mixed_7c/branch1x1/conv"] = P(devs, c=n)
    out["fc"] = P(devs, o=n)
    out["loss"] = P(list(reversed(devs)), c=n)
    return out


APP = App("inception", "Inception-v3", build, per_device_batch=64, small_per_device_batch=8,
          add_arguments=lambda p: add_image_arguments(p, 299, 75),
          mixed_strategy=mixed_strategy, expert="one_weird_trick", lr=0.01, image=True)

if __name__ == "__main__":
    exit_frozen(main(APP))          # (no collection at shutdown: apps/scriptgc.py)
