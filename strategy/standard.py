"""The textbook strategies of a Model on a list of devices: data, parameter, attribute and
operation parallelism, and random strategies (the accuracy benchmark's cases, the search's
starting points).

Every function returns a strategy for every operator of the model (operator name ->
ParallelConfig) on `devices`, global device ids of a taskrt Machine. Degrees respect the
extents (`parallel_ops.config.validate` accepts every config): where a dim is shorter than
the device list, an operator uses fewer devices (the first ones of the list), and where the
dim a strategy wants is missing or of extent 1, the operator falls back to data parallelism
(or runs whole on the first device when it has no sample dim either).

    s = parameter_parallel(model, [0, 1, 2, 3])
    s["fc6"]   # ParallelConfig.of([0, 1, 2, 3], o=4)
"""
from __future__ import annotations

import random
from math import prod
from typing import Sequence

from parallel_ops.config import ParallelConfig
from parallel_ops.op import ATTRIBUTE, PARAMETER, REDUCTION, SAMPLE, Dim, Op


def _devices(devices: Sequence[int]) -> list[int]:
    out = list(devices)
    if not out:
        raise ValueError("standard strategies: empty device list; give at least one device id.")
    if len(set(out)) != len(out):
        raise ValueError(f"standard strategies: devices {out} repeat an id; give each once.")
    return out


def split(op: Op, dim: Dim | None, devices: Sequence[int]) -> ParallelConfig:
    """`op` split on `dim` over as many of `devices` as it allows (whole on the
    first device when dim is None)."""
    if dim is None:
        return ParallelConfig((), (devices[0],))
    n = min(len(devices), dim.max_degree)
    return ParallelConfig(((dim.name, n),), tuple(devices[:n]))


def first_dim(op: Op, kind: str) -> Dim | None:
    """The operator's first dim of `kind` (SAMPLE, PARAMETER, ...), or None."""
    return next((d for d in op.dims if d.kind == kind), None)


def split_on_sample(op: Op, devices: Sequence[int]) -> ParallelConfig:
    """`op` data parallel over `devices` (whole on the first device without a sample dim)."""
    return split(op, first_dim(op, SAMPLE), devices)


def data_parallel(model, devices: Sequence[int]) -> dict[str, ParallelConfig]:
    """Every operator split on its sample dim (whole on the first device without one)."""
    devices = _devices(devices)
    return {op.name: split_on_sample(op, devices) for op in model.ops}


def parameter_parallel(model, devices: Sequence[int]) -> dict[str, ParallelConfig]:
    """Operators with a parameter dim (output channels of linear and conv, embedding width,
    LSTM hidden units, batch/layer norm channels) split on it; the others data parallel."""
    devices = _devices(devices)
    out = {}
    for op in model.ops:
        dim = first_dim(op, PARAMETER)
        out[op.name] = split(op, dim, devices) if dim is not None and dim.extent > 1 \
            else split_on_sample(op, devices)
    return out


def attribute_dim(op: Op) -> Dim | None:
    """The attribute dim attribute parallelism splits: the height of an NCHW output (its
    third axis), else the first attribute dim (a sequence, or features), else None."""
    attrs = [d for d in op.dims if d.kind == ATTRIBUTE and d.extent > 1]
    if not attrs:
        return None
    if op.outputs and op.outputs[0].ndim == 4 and len(op.dims) > 2 \
            and op.dims[2].kind == ATTRIBUTE and op.dims[2].extent > 1:
        return op.dims[2]
    return attrs[0]


def attribute_parallel(model, devices: Sequence[int]) -> dict[str, ParallelConfig]:
    """Operators with an attribute dim (image height, sequence) split on it (see
    `attribute_dim`); the others data parallel."""
    devices = _devices(devices)
    out = {}
    for op in model.ops:
        dim = attribute_dim(op)
        out[op.name] = split(op, dim, devices) if dim is not None else split_on_sample(op, devices)
    return out


def op_work(op: Op) -> float:
    """A device-independent estimate of an operator's work: the positions it computes
    (sample and attribute extents) times the weight elements each one uses (MACs of linear,
    conv, LSTM), or times its parameter and reduction extents when it has no weights. An
    embedding reads one row of its table per position, not the whole table."""
    positions = prod(d.extent for d in op.dims if d.kind in (SAMPLE, ATTRIBUTE))
    if op.type == "embedding":
        per = prod(d.extent for d in op.dims if d.kind == PARAMETER)
    else:
        per = sum(prod(w.shape) for w in op.weights)
    if not per:
        per = prod(d.extent for d in op.dims if d.kind in (PARAMETER, REDUCTION))
    return float(max(1, positions * per))


def balanced_blocks(work: Sequence[float], k: int) -> list[int]:
    """Block index (0..k-1) of each item, cutting the sequence into at most k contiguous
    non-empty blocks with the smallest possible largest block sum (exact, by dynamic
    programming; ties keep blocks early)."""
    n = len(work)
    k = min(k, n)
    if k <= 1:
        return [0] * n
    pre = [0.0]
    for w in work:
        pre.append(pre[-1] + w)
    inf = float("inf")
    # best[j][i]: smallest largest sum cutting the first i items into j blocks
    best = [[inf] * (n + 1) for _ in range(k + 1)]
    cut = [[0] * (n + 1) for _ in range(k + 1)]
    best[0][0] = 0.0
    for j in range(1, k + 1):
        for i in range(j, n - (k - j) + 1):
            for c in range(j - 1, i):
                v = max(best[j - 1][c], pre[i] - pre[c])
                if v < best[j][i]:
                    best[j][i], cut[j][i] = v, c
    blocks, i = [0] * n, n
    for j in range(k, 0, -1):
        c = cut[j][i]
        for t in range(c, i):
            blocks[t] = j - 1
        i = c
    return blocks


def operation_parallel(model, devices: Sequence[int]) -> dict[str, ParallelConfig]:
    """Every operator whole on one device; operators are cut in program order into one
    contiguous block per device with balanced work (`op_work`), so that a model with at
    least as many operators as devices uses every device."""
    devices = _devices(devices)
    blocks = balanced_blocks([op_work(op) for op in model.ops], len(devices))
    return {op.name: ParallelConfig((), (devices[b],)) for op, b in zip(model.ops, blocks)}


def random_config(op: Op, devices: Sequence[int], rng: random.Random) -> ParallelConfig:
    """A random valid config of `op`: a random subset of its dims in random order, each
    given a random degree within its extent and what the device count leaves (the product
    of degrees is at most len(devices)), on a random choice of distinct devices."""
    budget = len(devices)
    degrees = {}
    dims = [d for d in op.dims if rng.random() < 0.5]
    rng.shuffle(dims)
    for d in dims:
        top = min(d.max_degree, budget)
        if top < 2:
            continue
        g = rng.randint(1, top)
        if g > 1:
            degrees[d.name] = g
            budget //= g
    ordered = tuple((d.name, degrees[d.name]) for d in op.dims if d.name in degrees)
    parts = prod(g for _, g in ordered)
    return ParallelConfig(ordered, tuple(rng.sample(list(devices), parts)))


def random_strategy(model, devices: Sequence[int], rng: random.Random | int
                    ) -> dict[str, ParallelConfig]:
    """A random valid config per operator (see `random_config`); `rng` is a random.Random
    or a seed, and the same seed gives the same strategy."""
    devices = _devices(devices)
    if not isinstance(rng, random.Random):
        rng = random.Random(rng)
    return {op.name: random_config(op, devices, rng) for op in model.ops}


STANDARD = {"data": data_parallel, "parameter": parameter_parallel,
            "attribute": attribute_parallel, "operation": operation_parallel}
"""The deterministic strategies by short name."""
