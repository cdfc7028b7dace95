"""Exhaustive search over a finite search space, to check that MCMC finds the optimum.

Every strategy of the space (the product of each searchable operator's configs) is simulated.
They are visited in reflected mixed-radix Gray-code order, so consecutive strategies differ
in exactly one operator's config and each is one delta simulation (strategy/delta.py), which
gives exactly the full simulation's time. The space must be small: use
SearchSpace.restricted() and freeze cheap operators; `limit` refuses spaces that are too big
before anything runs, and says how big they are.

    space = SearchSpace.for_machine(model, mm).restricted(frozen={"loss"})
    best = exhaustive(model, mm, costs, space, optimizer=opt)
    best.configs, best.predicted, best.evaluated
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from math import prod

from .delta import SimulationSession


@dataclass
class ExhaustiveResult:
    configs: dict               # the optimum (ties: the first in visiting order)
    predicted: float            # its simulated iteration time
    evaluated: int              # strategies simulated
    seconds: float
    sizes: dict                 # operator name -> number of configs it took


class SpaceTooLarge(ValueError):
    """The space has more strategies than the caller allowed."""


def gray_steps(radices):
    """(digit, value) steps of the reflected mixed-radix Gray code from all zeros: each step
    changes one digit by one, and every combination is visited once."""
    digits = [0] * len(radices)
    direction = [1] * len(radices)
    while True:
        j = 0
        while j < len(radices):
            nxt = digits[j] + direction[j]
            if 0 <= nxt < radices[j]:
                digits[j] = nxt
                yield j, nxt
                break
            direction[j] = -direction[j]
            j += 1
        else:
            return


def space_size(space) -> tuple[int, dict]:
    sizes = {op.name: space.count(op) for op in space.searchable()}
    return prod(sizes.values()), sizes


def exhaustive(model, machine_model, costs, space, *, optimizer=None, base=None,
               limit: int = 200_000, progress=None) -> ExhaustiveResult:
    """The best strategy of `space`: searchable operators take every config of the space,
    the frozen ones keep `base`'s config (data parallel when not in `base`)."""
    total, sizes = space_size(space)
    if total > limit:
        raise SpaceTooLarge(
            f"exhaustive search: {total:,} strategies ({' x '.join(map(str, sizes.values()))} "
            f"configs for {len(sizes)} operators) exceed the limit of {limit:,}; freeze more "
            "operators or restrict the space (SearchSpace.restricted)")
    t0 = time.perf_counter()
    ops = space.searchable()
    choices = [list(space.configs(op)) for op in ops]
    strategy = dict(base or {})
    for op, cs in zip(ops, choices):
        strategy[op.name] = cs[0]
    session = SimulationSession(model, machine_model, costs, strategy, optimizer)
    best_t, best = session.result.makespan, dict(session.configs)
    evaluated = 1
    for j, k in gray_steps([len(c) for c in choices]):
        t = session.change(ops[j].name, choices[j][k]).makespan
        evaluated += 1
        if t < best_t:
            best_t, best = t, dict(session.configs)
        if progress is not None and evaluated % 500 == 0:
            progress(evaluated, total, best_t)
    return ExhaustiveResult(best, best_t, evaluated, time.perf_counter() - t0, sizes)
