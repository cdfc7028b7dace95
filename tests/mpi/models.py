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
    """A random valid config for every operator (degrees <= extents, random devices)."""
    rng = random.Random(seed)
    out = {}
    for op in model.ops:
        degrees, parts = {}, 1
        for d in rng.sample(list(op.dims), len(op.dims)):
            opts = [k for k in range(1, min(d.extent, num_devices) + 1)
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


MODELS = {"mlp": (mlp, mlp_strategies)}
