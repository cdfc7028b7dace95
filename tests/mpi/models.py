"""Small models and strategies shared by the multi-rank tests (built identically on every rank)."""
from __future__ import annotations

import random

import torch

from parallel_ops import Model, ParallelConfig


def mlp(batch=8):
    m = Model("mlp", seed=0, dtype="float64")
    x = m.input("x", (batch, 6), requires_grad=True)
    y = m.input("y", (batch,), dtype="int64")
    h = m.linear(x, 8, name="fc1")
    h2 = m.linear(h, 8, name="fc2")
    logits = m.linear(h2, 5, name="fc3")
    m.softmax_cross_entropy(logits, y, name="loss")
    g = torch.Generator().manual_seed(7)
    feeds = {"x": torch.randn(batch, 6, generator=g, dtype=torch.float64),
             "y": torch.randint(0, 5, (batch,), generator=g)}
    return m, feeds


def random_strategy(model, num_devices, seed):
    """A random valid config for every operator (degrees <= extents, dims that must stay
    whole unsplit, random devices)."""
    rng = random.Random(seed)
    out = {}
    for op in model.ops:
        degrees, parts = {}, 1
        for d in rng.sample(list(op.dims), len(op.dims)):
            opts = [k for k in range(1, min(d.max_degree, num_devices) + 1)
                    if parts * k <= num_devices]
            k = rng.choice(opts)
            degrees[d.name] = k
            parts *= k
        ordered = {d.name: degrees[d.name] for d in op.dims}
        devs = [rng.randrange(num_devices) for _ in range(parts)]
        out[op.name] = ParallelConfig.of(devs, **ordered)
    return out


def mlp_strategies(n):
    devs = list(range(n))
    half = max(1, n // 2)
    return {
        "data_parallel": {},
        "parameter": {"fc1": ParallelConfig.of(devs, o=n), "fc2": ParallelConfig.of(devs, o=n),
                      "fc3": ParallelConfig.of(devs, o=min(n, 5))},
        "reduction": {"fc2": ParallelConfig.of(devs, i=n), "fc3": ParallelConfig.of(devs, i=n),
                      "loss": ParallelConfig.of(devs, c=min(n, 5))},
        "operation": {"fc1": ParallelConfig.of(devs[:half], n=half),
                      "fc2": ParallelConfig.of(devs[half:] or devs[:1], n=len(devs[half:]) or 1),
                      "fc3": ParallelConfig.of([n - 1], n=1),
                      "loss": ParallelConfig.of([0], n=1)},
        "random": random_strategy(mlp()[0], n, seed=n),
    }


def cnn(batch=4):
    """Two conv branches (operation parallelism), batch norm, pooling, a classifier."""
    m = Model("cnn", seed=0, dtype="float64")
    x = m.input("x", (batch, 3, 8, 8), requires_grad=True)
    y = m.input("y", (batch,), dtype="int64")
    h = m.relu(m.batchnorm2d(m.conv2d(x, 4, 3, padding=1, name="conv1"), name="bn1"),
               name="relu1")
    a = m.conv2d(h, 4, 3, padding=1, name="branch_a")
    b = m.conv2d(h, 4, 1, name="branch_b")
    h = m.concat([a, b], 1, name="concat")
    h = m.max_pool2d(h, 2, name="pool")
    h = m.adaptive_avg_pool2d(h, 1, name="gap")
    logits = m.linear(m.flat(h, name="flat"), 5, name="fc")
    m.softmax_cross_entropy(logits, y, name="loss")
    g = torch.Generator().manual_seed(8)
    feeds = {"x": torch.randn(batch, 3, 8, 8, generator=g, dtype=torch.float64),
             "y": torch.randint(0, 5, (batch,), generator=g)}
    return m, feeds


def cnn_strategies(n):
    devs = list(range(n))
    half = max(1, n // 2)
    first, second = devs[:half], devs[half:] or devs[:1]
    return {
        "data_parallel": {},
        "parameter": {"conv1": ParallelConfig.of(devs, c=n), "bn1": ParallelConfig.of(devs, c=n),
                      "branch_a": ParallelConfig.of(devs, c=n), "fc": ParallelConfig.of(devs, o=n)},
        "attribute": {"conv1": ParallelConfig.of(devs, h=n), "relu1": ParallelConfig.of(devs, a2=n),
                      "branch_a": ParallelConfig.of(devs, w=n), "pool": ParallelConfig.of(devs, h=n)},
        "reduction": {"branch_a": ParallelConfig.of(devs, ci=n),
                      "fc": ParallelConfig.of(devs, i=min(n, 8))},
        "operation": {"branch_a": ParallelConfig.of(first, n=len(first)),
                      "branch_b": ParallelConfig.of(second, n=len(second))},
        "random": random_strategy(cnn()[0], n, seed=10 + n),
    }


def lstm_model(batch=4, steps=3):
    m = Model("lstm", seed=0, dtype="float64")
    tokens = m.input("tokens", (batch, steps), dtype="int64")
    y = m.input("y", (batch, steps), dtype="int64")
    e = m.embedding(tokens, 11, 6, name="embed")
    h = m.lstm(e, 8, num_layers=2, name="lstm")
    logits = m.linear(h, 11, name="proj")
    m.softmax_cross_entropy(logits, y, name="loss")
    g = torch.Generator().manual_seed(9)
    feeds = {"tokens": torch.randint(0, 11, (batch, steps), generator=g),
             "y": torch.randint(0, 11, (batch, steps), generator=g)}
    return m, feeds


def lstm_strategies(n):
    devs = list(range(n))
    half = max(1, n // 2)
    first, second = devs[:half], devs[half:] or devs[:1]
    return {
        "data_parallel": {},
        "parameter": {"lstm_l0": ParallelConfig.of(devs, h=n), "lstm_l1": ParallelConfig.of(devs, h=n),
                      "proj": ParallelConfig.of(devs, o=n)},
        "attribute": {"proj": ParallelConfig.of(devs[:min(n, 3)], s1=min(n, 3)),
                      "loss": ParallelConfig.of(devs[:min(n, 3)], s1=min(n, 3))},
        "reduction": {"embed": ParallelConfig.of(devs, v=n), "proj": ParallelConfig.of(devs, i=n)},
        "operation": {"lstm_l0": ParallelConfig.of(first, n=len(first)),
                      "lstm_l1": ParallelConfig.of(second, n=len(second))},
        "random": random_strategy(lstm_model()[0], n, seed=20 + n),
    }


MODELS = {"mlp": (mlp, mlp_strategies), "cnn": (cnn, cnn_strategies),
          "lstm": (lstm_model, lstm_strategies)}
