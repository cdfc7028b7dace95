"""AlexNet as torchvision defines it (61,100,840 parameters at 1000 classes): five
convolutions with ReLU and three max pools, adaptive average pooling to 6x6, and three fully
connected layers with dropout; the FlexFlow paper's 12-layer CNN benchmark. Each ReLU runs in
the launch of the convolution or fully connected layer before it (activation="relu").

    mpirun -np 2 python -m mpi4py apps/alexnet.py --small                 # 2 CPU ranks
    mpirun -np 4 python -m mpi4py apps/alexnet.py                         # 4 GPUs, 1 per rank
    python apps/alexnet.py --small --data digits --image-size 63 --batch-size 32 \\
        --optimizer adam --lr 0.002 --iterations 60                        # real data

Full size: 224x224 images, 1000 classes, per-device batch 256 (as in the paper). --small:
channel counts and fully connected widths divided by 8, 127x127 images, 10 classes.
--data digits trains on scikit-learn's handwritten digits scaled up to the input size and
reports the accuracy of every batch (measured before training on it) and, at the end, on
297 held-out digits; the numbers are the same under every strategy.
"""
from __future__ import annotations

from apps.scriptgc import exit_frozen, imports_paused

with imports_paused():                 # (torch's and our objects: apps/scriptgc.py)
    from apps.cnn import add_image_arguments, image_model, image_network, image_sizes
    from apps.common import App, Network, P, main
    from parallel_ops import Model


def build(a) -> Network:
    classes, size, div = image_sizes(a, 224, 127, 63)
    m, x, labels = image_model("alexnet", a, size)
    convs = [(64, 11, 4, 2), (192, 5, 1, 2), (384, 3, 1, 1), (256, 3, 1, 1), (256, 3, 1, 1)]
    for k, (c, kernel, stride, pad) in enumerate(convs, start=1):
        x = m.conv2d(x, c // div, kernel, stride=stride, padding=pad, name=f"conv{k}",
                     activation="relu")
        if k in (1, 2, 5):
            x = m.max_pool2d(x, 3, stride=2, name=f"pool{k}")
    x = m.flat(m.adaptive_avg_pool2d(x, (6, 6), name="avgpool"), name="flat")
    for k in (6, 7):
        x = m.dropout(x, 0.5, name=f"drop{k}")
        x = m.linear(x, 4096 // div, name=f"fc{k}", activation="relu")
    logits = m.linear(x, classes, name="fc8")
    return image_network(m, logits, labels, classes)


def mixed_strategy(model: Model, n: int) -> dict:
    """Krizhevsky's "one weird trick": convolutions data parallel (the first split on image
    rows, attribute parallelism), fully connected layers split on their outputs (parameter),
    the dropouts between them on features, the loss on classes."""
    devs = list(range(n))
    out = {"conv1": P(devs, h=n), "pool1": P(devs, c=n)}
    for k in (6, 7):
        out[f"drop{k}"] = P(devs, a1=n) if k == 7 else P(devs, n=n)
        out[f"fc{k}"] = P(devs, o=n)
    out["fc8"] = P(devs, o=n)
    out["loss"] = P(devs, c=n)
    return out


APP = App("alexnet", "AlexNet", build, per_device_batch=256, small_per_device_batch=8,
          add_arguments=lambda p: add_image_arguments(p, 224, 127),
          mixed_strategy=mixed_strategy, expert="one_weird_trick", lr=0.01, image=True)

if __name__ == "__main__":
    exit_frozen(main(APP))          # (no collection at shutdown: apps/scriptgc.py)
