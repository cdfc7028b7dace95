"""The model, data and strategies the checkpoint tests share (built alike on every rank).

conv (no bias: batch norm cancels it, and Adam would amplify its zero gradient
noise) -> batch norm (running statistics are buffers) -> relu -> flat -> dropout (its mask
depends on the step count and the seed) -> linear -> loss, trained with Adam (its bias
correction depends on the optimizer's step count): resuming must restore all of them.
"""
from __future__ import annotations

import torch

from parallel_ops import Adam, Model, ParallelConfig

STEPS = 4


def build(seed: int = 0) -> Model:
    m = Model("ckptnet", seed=seed, dtype="float64")
    x = m.input("x", (6, 2, 4, 4))
    y = m.input("y", (6,), dtype="int64")
    h = m.conv2d(x, 4, 3, padding=1, bias=False, name="conv")
    h = m.relu(m.batchnorm2d(h, name="bn"), name="relu")
    h = m.dropout(m.flat(h, name="flat"), 0.25, name="drop")
    m.softmax_cross_entropy(m.linear(h, 5, name="fc"), y, name="loss")
    return m


def optimizer():
    return Adam(lr=0.01)


def batches(n: int = STEPS):
    g = torch.Generator().manual_seed(42)
    return [{"x": torch.randn(6, 2, 4, 4, generator=g, dtype=torch.float64),
             "y": torch.randint(0, 5, (6,), generator=g)} for _ in range(n)]


def cfg(devs, **deg):
    return ParallelConfig.of(devs, **deg)


STRATEGIES = {
    # two devices (two ranks under mpirun -np 2)
    "A": {"conv": cfg([0, 1], n=2), "bn": cfg([0, 1], c=2), "fc": cfg([0, 1], o=2),
          "loss": cfg([0, 1], n=2)},
    "B": {"conv": cfg([1, 0], c=2), "bn": cfg([1, 0], n=2), "drop": cfg([0, 1], a1=2),
          "fc": cfg([0, 1], i=2), "loss": cfg([1, 0], c=2)},
    # three devices
    "C": {"conv": cfg([0, 1, 2], n=3), "bn": cfg([2, 1], c=2), "fc": cfg([2, 0, 1], o=3),
          "loss": cfg([0, 1, 2], n=3)},
    "D": {"conv": cfg([0, 2], ci=2), "bn": cfg([1, 2], h=2), "relu": cfg([0, 1, 2], n=3),
          "fc": cfg([1, 2, 0], n=3), "loss": cfg([2, 0, 1], c=3)},
}


def compile_(machine, strategy: str, seed: int = 0):
    return build(seed).compile(machine, STRATEGIES[strategy], optimizer())
