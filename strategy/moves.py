"""The search's proposals beyond one operator's random config (SearchSpace.propose): moves
aimed at memory, and activation recomputation toggled per segment.

Memory. A strategy over a device's capacity is invalid (strategy/search.py); from such a
start (data parallelism of a model whose weights and Adam state do not fit one device) a
uniformly chosen operator rarely is one that matters. `shard_move` looks where the memory
is: on the fullest device of the current simulation, the bytes of every operator's regions
(its weights, their gradients and optimizer state, its activations: the planner's instances
and partial-sum buffers on that device), and proposes, for an operator drawn with
probability proportional to its weights' bytes there, a config that splits its weights
finer (SearchSpace.shard).

Recomputation. `RecomputeUnits` are the segments (parallel_ops/recompute.py) a search may
switch on and off one at a time: the distinct segments of the named plans it was given
(for the GPT: one per transformer block). A state is the set of units switched on; a plan
name is kept where the state is one of the plans. `target` names the unit to switch on
to free the most activation bytes on the fullest device.
"""
from __future__ import annotations

import random


def fullest_device(result) -> int:
    """The device with the highest peak memory of a simulation."""
    return max(result.memory, key=lambda d: (result.memory[d], -d))


def region_owner(name: str, ops: dict):
    """The operator whose region `name` is: its output ('h0/attn'), a weight of it
    ('h0/attn.in_proj_weight'), or either's gradient, optimizer state or recomputed copy
    ('...@grad', '...@exp_avg', '...@re'); None for the model's inputs."""
    base = name.split("@")[0]
    while base not in ops and "." in base:
        base = base.rsplit(".", 1)[0]
    return ops.get(base)


def bytes_on(session, device: int) -> tuple[dict, dict]:
    """({op name: bytes of its weights' regions}, {op name: bytes of its other regions}) on
    `device` in the session's plan: instances and partial-sum buffers, as the memory model
    holds them (their bounding rects)."""
    ops = {op.name: op for op in session.model.ops}
    weights = {w.name for op in ops.values() for w in op.weights}
    by_weight: dict[str, int] = {}
    by_activation: dict[str, int] = {}
    for name, rp in session.planner.planners.items():
        op = region_owner(name, ops)
        if op is None:
            continue
        nbytes = sum(rp.region.nbytes(rects[device]) for rects in
                     (rp.instance_rects, rp.partial_rects) if device in rects)
        if nbytes:
            into = by_weight if name.split("@")[0] in weights else by_activation
            into[op.name] = into.get(op.name, 0) + nbytes
    return by_weight, by_activation


def shard_move(space, session, rng: random.Random):
    """(op name, config) splitting the weights of an operator that holds many bytes on the
    fullest device (module doc), or None when no operator there can be split further."""
    device = fullest_device(session.result)
    by_weight, _ = bytes_on(session, device)
    searchable = {op.name: op for op in space.searchable()}
    pool = [(name, b) for name, b in by_weight.items() if name in searchable]
    while pool:
        total = sum(b for _, b in pool)
        x, k = rng.random() * total, 0
        while k < len(pool) - 1 and x >= pool[k][1]:
            x -= pool[k][1]
            k += 1
        name = pool.pop(k)[0]
        new = space.shard(searchable[name], session.configs[name], rng)
        if new is not None:
            return name, new
    return None


class RecomputeUnits:
    """The segments a search toggles (module doc) and the named plans among their states.

        units = RecomputeUnits({"none": [], "full": per_block(model, block_of)})
        units.segments(units.plans["full"]), units.name(frozenset({0, 3}))
    """

    def __init__(self, plans: dict):
        self.units: list[tuple[str, ...]] = []
        index: dict[tuple, int] = {}
        self.plans: dict[str, frozenset] = {}
        for name, segments in plans.items():
            state = set()
            for seg in segments:
                key = tuple(seg)
                if key not in index:
                    index[key] = len(self.units)
                    self.units.append(key)
                state.add(index[key])
            self.plans[name] = frozenset(state)

    def __len__(self) -> int:
        return len(self.units)

    def segments(self, state: frozenset) -> list[list[str]]:
        return [list(self.units[k]) for k in sorted(state)]

    def name(self, state: frozenset) -> str:
        """The plan's name where `state` is a named plan, else which segments are on."""
        for name, s in self.plans.items():
            if s == state:
                return name
        on = sorted(state)
        return (f"{len(on)} of {len(self.units)} segments: "
                + ", ".join(self.units[k][0] for k in on))

    def target(self, session, state: frozenset) -> int | None:
        """The unit not yet on whose operators hold the most activation bytes on the
        fullest device (switching it on frees them); None when every unit is on."""
        device = fullest_device(session.result)
        _, by_activation = bytes_on(session, device)
        best, most = None, -1
        for k, unit in enumerate(self.units):
            if k in state:
                continue
            b = sum(by_activation.get(name, 0) for name in unit)
            if b > most:
                best, most = k, b
        return best


__all__ = ["fullest_device", "region_owner", "bytes_on", "shard_move", "RecomputeUnits"]
