"""slabplans' grouping of a log by slab, done with C loops (`_splits`, `_by_slab`, the reads'
one-slab check), against the per-rect walks they replace, on random logs: the same slab
dimension, starts and ends, and per entry the same slabs in the same order with the same
access positions."""
from __future__ import annotations

import random
from bisect import bisect_right
from types import SimpleNamespace

import pytest

from taskrt import Rect
from taskrt import slabplans


def _walk_slabs(ndim, log):
    """_splits' first (the most slabs) as a walk over every access rect and dimension (the
    code it replaced)."""
    spans = [set() for _ in range(ndim)]
    for _, _, accesses in log:
        for _, _, req in accesses:
            r = req.rect
            if r.empty:
                return None
            for d, lo_hi in enumerate(zip(r.lo, r.hi)):
                spans[d].add(lo_hi)
    best = None
    for d, found in enumerate(spans):
        merged = _components(found)
        if len(merged) > 1 and (best is None or len(merged) > len(best[1])):
            best = (d, merged)
    if best is None:
        return None
    return best[0], [a for a, _ in best[1]], [b for _, b in best[1]]


def _components(spans):
    """The spans [a, b) joined where they overlap (not where they only touch), transitively:
    by pairs (not the sorted sweep slabplans uses), each group as (lowest a, highest b), in
    order."""
    spans = list(spans)
    group = list(range(len(spans)))

    def root(i):
        while group[i] != i:
            i = group[i]
        return i
    for i, (a, b) in enumerate(spans):
        for j, (c, e) in enumerate(spans[:i]):
            if a < e and c < b:
                group[root(i)] = root(j)
    joined = {}
    for i, (a, b) in enumerate(spans):
        lo, hi = joined.get(root(i), (a, b))
        joined[root(i)] = (min(lo, a), max(hi, b))
    return sorted(joined.values())


def _rect(rng, ndim, empty_chance):
    lo, hi = [], []
    for _ in range(ndim):
        a = rng.randrange(12)
        b = a + rng.choice((1, 1, 2, 3)) if rng.random() > empty_chance else a
        lo.append(a)
        hi.append(b)
    return Rect(tuple(lo), tuple(hi))


@pytest.mark.parametrize("seed", range(200))
def test_slabs_equal_the_walk(seed):
    rng = random.Random(seed)
    ndim = rng.randint(1, 3)
    empty = rng.choice((0.0, 0.0, 0.02))
    log = [(e, None, [(p, 0, SimpleNamespace(rect=_rect(rng, ndim, empty)))
                      for p in range(rng.randint(1, 6))])
           for e in range(rng.randint(1, 8))]
    region = SimpleNamespace(rect=Rect((0,) * ndim, (16,) * ndim))
    assert (slabplans._splits(region, log) or [None])[0] == _walk_slabs(ndim, log)


@pytest.mark.parametrize("seed", range(300))
def test_by_slab_equals_bisecting_each(seed):
    rng = random.Random(seed)
    starts = sorted(rng.sample(range(40), rng.randint(1, 8)))
    lo, hi = starts[0], 44
    at = [rng.randrange(lo, hi) for _ in range(rng.choice((0, 1, 2, 5, 12)))]
    if rng.random() < 0.5 and at:       # most entries: every rect in one slab
        k = bisect_right(starts, at[0]) - 1
        end = starts[k + 1] if k + 1 < len(starts) else hi
        at = [rng.randrange(starts[k], end) for _ in at]
    want: dict = {}
    for a, x in enumerate(at):
        want.setdefault(bisect_right(starts, x) - 1, []).append(a)
    got = slabplans._by_slab(at, starts)
    assert [(k, list(v)) for k, v in got.items()] == list(want.items())
