"""ResNet with bottleneck blocks as torchvision defines it: ResNet-101 by default (44,549,160
parameters at 1000 classes), --depth 50 or 152 for its siblings (25,557,032 / 60,192,808).
A 7x7 stem with max pooling, four stages of bottleneck blocks (1x1, 3x3 with the stride,
1x1 expanding 4x; batch norm after each; a projection shortcut on each stage's first
block), global average pooling and a fully connected classifier.

    mpirun -np 2 python -m mpi4py apps/resnet.py --small                  # 2 CPU ranks
    mpirun -np 4 python -m mpi4py apps/resnet.py                          # 4 GPUs, 1 per rank
    python apps/resnet.py --small --depth 50 --devices-per-rank 2          # one process

Full size: 224x224 images, 1000 classes, per-device batch 64. --small: channel counts
divided by 8, 64x64 images, 10 classes, same depth and topology.
"""
from __future__ import annotations

from apps.scriptgc import exit_frozen, imports_paused

with imports_paused():                 # (torch's and our objects: apps/scriptgc.py)
    from apps.cnn import (add_image_arguments, conv_bn, image_model, image_network,
                          image_sizes)
    from apps.common import App, Network, P, main
    from parallel_ops import Model

BLOCKS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}


def bottleneck(m: Model, x, planes: int, stride: int, name: str, project: bool):
    y = conv_bn(m, x, planes, 1, f"{name}/1")
    y = conv_bn(m, y, planes, 3, f"{name}/2", stride=stride, padding=1)
    y = conv_bn(m, y, planes * 4, 1, f"{name}/3", relu=False)
    if project:
        x = conv_bn(m, x, planes * 4, 1, f"{name}/downsample", stride=stride, relu=False)
    return m.add(y, x, name=f"{name}/add", activation="relu")


def build(a) -> Network:
    classes, size, div = image_sizes(a, 224, 64, 32)
    m, x, labels = image_model(f"resnet{a.depth}", a, size)
    x = conv_bn(m, x, 64 // div, 7, "stem", stride=2, padding=3)
    x = m.max_pool2d(x, 3, stride=2, padding=1, name="maxpool")
    for stage, blocks in enumerate(BLOCKS[a.depth]):
        planes = (64 << stage) // div
        for k in range(blocks):
            first = k == 0
            x = bottleneck(m, x, planes, 2 if first and stage > 0 else 1,
                           f"layer{stage + 1}/{k}", project=first)
    x = m.flat(m.adaptive_avg_pool2d(x, 1, name="avgpool"), name="flat")
    logits = m.linear(x, classes, name="fc")
    return image_network(m, logits, labels, classes)


def mixed_strategy(model: Model, n: int) -> dict:
    """What the paper finds for ResNet: data parallel except the classifier, split on its
    outputs (parameter) with the loss on classes; plus the stem split on image rows
    (attribute) and the last block's 3x3 convolution split on output channels (parameter)."""
    devs = list(range(n))
    last = [op.name for op in model.ops if op.name.endswith("/2/conv")][-1]
    return {"stem/conv": P(devs, h=n), "stem/bn": P(devs, h=n), last: P(devs, c=n),
            "fc": P(devs, o=n), "loss": P(list(reversed(devs)), c=n)}


def add_arguments(p) -> None:
    add_image_arguments(p, 224, 64)
    p.add_argument("--depth", type=int, choices=sorted(BLOCKS), default=101,
                   help="ResNet-50, -101 (default) or -152")


APP = App("resnet", "ResNet", build, per_device_batch=64, small_per_device_batch=8,
          add_arguments=add_arguments, mixed_strategy=mixed_strategy,
          expert="one_weird_trick", lr=0.01, image=True)

if __name__ == "__main__":
    exit_frozen(main(APP))          # (no collection at shutdown: apps/scriptgc.py)
