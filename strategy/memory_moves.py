"""An out-of-memory chain's proposals (strategy/search.py MEMORY_MOVE): split weights finer
where weights fill the fullest device, spread operators over the devices where their
activations do.

A random start of a convolutional network is over memory by its activations, not its
weights: Inception-v3 on 16 P100s (seed 0) holds 53.5 GB on its fullest device, of which
0.11 GB are weights (its regions hold 97 GB of activations there over the iteration), and
all 16 devices are over. Splitting weights (moves.shard_move) cannot fix that: 579
proposals took the devices' bytes over capacity from 338 to 236 GB, never into memory.
Giving the drawn operator alone data parallelism took them to 204 GB in 250 proposals
(its neighbours then copy its inputs and outputs to and from other devices); giving it
and its dataflow neighbours data parallelism together (`spread_move`) reaches memory in
78-97 proposals (seeds 0, 1; ResNet-101 @16: 165-176, where 1,300-1,500 old proposals
never did; 2026-12-07). The chain then searches from there as from any fitting start.

`memory_move` draws which: a weight split with probability the share of the fullest
device's bytes that are weights (with their gradients and optimizer state), else a spread
of an operator drawn by its activations and saved state there (moves.bytes_on).
"""
from __future__ import annotations

import random

from .moves import bytes_on, fullest_device, pop_drawn, shard_move


def data_parallel(space, op):
    """`op`'s config splitting only its sample dim, over the most devices (from device 0)
    the space allows; None when it has no sample dim."""
    sample = next((i for i, d in enumerate(op.dims) if d.kind == "sample"), None)
    if sample is None:
        return None
    allowed = set(space.degree_tuples(op))
    for k in range(space.n, 0, -1):
        degrees = tuple(k if i == sample else 1 for i in range(len(op.dims)))
        if degrees in allowed and space.has_devices(range(k)):
            return space.config(op, degrees, range(k))
    return None


def spread_move(space, session, rng: random.Random, held: dict | None = None):
    """A move giving an operator drawn by `held` ({op name: bytes of its activations and
    saved state on the fullest device}, default from bytes_on) and its dataflow partners
    (SearchSpace.partners) data parallelism: ('op', name, config) for one change,
    ('group', changes, their configs now) for more; None when no drawn operator and
    partners have anything to change."""
    if held is None:
        held = _held(session, bytes_on(session, fullest_device(session.result)))
    searchable = {op.name: op for op in space.searchable()}
    pool = [(name, b) for name, b in sorted(held.items()) if name in searchable and b > 0]
    configs = session.configs
    while pool:
        op = searchable[pop_drawn(pool, rng)]
        changes = []
        for one in [op] + space.partners(op):
            new = data_parallel(space, one)
            if new is not None and new != configs[one.name]:
                changes.append((one.name, new))
        if len(changes) == 1:
            return ("op",) + changes[0]
        if changes:
            return "group", tuple(changes), tuple(configs[name] for name, _ in changes)
    return None


def _held(session, counts: tuple) -> dict:
    """{op name: activation and saved-state bytes} of bytes_on's `counts`, times the
    operators each stands for (strategy/tied.py's multiplicity)."""
    _, by_activation, saved = counts
    times = getattr(session, "multiplicity", {})
    return {name: (by_activation.get(name, 0) + saved.get(name, 0)) * times.get(name, 1)
            for name in set(by_activation) | set(saved)}


def memory_move(space, session, rng: random.Random):
    """An out-of-memory chain's move (module doc): a weight split (('op', name, config),
    moves.shard_move) or a spread (spread_move), drawn by the fullest device's weight
    bytes against its other bytes; the other kind where the drawn one has no move; None
    where neither has."""
    counts = bytes_on(session, fullest_device(session.result))
    times = getattr(session, "multiplicity", {})
    weights = sum(b * times.get(name, 1) for name, b in counts[0].items())
    held = _held(session, counts)

    def shard():
        move = shard_move(space, session, rng)
        return None if move is None else ("op",) + move

    def spread():
        return spread_move(space, session, rng, held)

    kinds = (shard, spread) if rng.random() * (weights + sum(held.values())) < weights \
        else (spread, shard)
    return kinds[0]() or kinds[1]()


__all__ = ["data_parallel", "spread_move", "memory_move"]
