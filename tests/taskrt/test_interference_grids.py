"""check_interference's fast paths for a launch's grid of parts and for writes apart from
overlapping reads or sums (interference._disjoint's grid test, _writes_apart): an LSTM step
reads step t-1 of its state on every point and writes its part of step t; a 2-d partition
writes a grid of blocks. Each fast path says "cannot interfere" only where no pair of accesses
conflicts by the rule pair by pair (tests/interference_oracle.py), and those shapes take it."""
import os
import random
import sys

import pytest

from taskrt import R, RED, RW, WD, Rect, Region, RegionRequirement
from taskrt.interference import _cannot_interfere

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from interference_oracle import check_as_oracle_says  # noqa: E402
from interference_oracle import conflicts as _conflicts  # noqa: E402


def _cuts(rng, n):
    """A few cut points of 0..n (always 0 and n)."""
    return sorted({0, n} | {rng.randrange(1, n) for _ in range(rng.randint(0, 3))})


def _cell(rng, cuts):
    """A random cell of the grid `cuts` (a list of cut points per dimension)."""
    lo, hi = [], []
    for c in cuts:
        k = rng.randrange(len(c) - 1)
        lo.append(c[k])
        hi.append(c[k + 1])
    return Rect(tuple(lo), tuple(hi))


def _any_rect(rng, shape):
    lo = tuple(rng.randrange(n) for n in shape)
    return Rect(lo, tuple(rng.randint(a + 1, n) for a, n in zip(lo, shape)))


@pytest.mark.parametrize("seed", range(400))
def test_grid_and_apart_paths_equal_the_rule_pair_by_pair(seed):
    """Random launches over a grid of 2 or 3 dimensions: writes on cells (some cell twice,
    some rect off the grid), reads and sums on cells or whole steps, empty rects."""
    rng = random.Random(seed)
    shape = tuple(rng.randint(4, 9) for _ in range(rng.choice((2, 3))))
    region = Region("a", shape)
    cuts = [_cuts(rng, n) for n in shape]
    points = []
    for k in range(rng.randint(2, 9)):
        reqs = []
        for _ in range(rng.randint(1, 3)):
            p = rng.choice([WD, WD, RW, R, R, RED])
            x = rng.random()
            if x < 0.75:
                rect = _cell(rng, cuts)
            elif x < 0.95:
                rect = _any_rect(rng, shape)
            else:
                rect = Rect((0,) * len(shape), (0,) * len(shape))
            reqs.append(RegionRequirement(region, rect, p))
        points.append(((k,), k if rng.random() < 0.8 else rng.randrange(4), tuple(reqs)))
    replicas = rng.random() < 0.3
    accesses = [(c, d, r) for c, d, rs in points for r in rs]
    if _cannot_interfere(accesses, replicas):
        assert not _conflicts(points, replicas)
    check_as_oracle_says(points, replicas)


def test_an_lstm_step_and_a_2d_grid_take_the_fast_path():
    """A step of a 4-point LSTM split over hidden: every point reads all of step 2's state
    and writes its quarter of step 3 (or sums into step 2 and reads step 3: its backward);
    a 2 x 3 grid of blocks written."""
    region = Region("h", (8, 4, 16))
    quarter = [Rect((3, 0, 4 * k), (4, 4, 4 * k + 4)) for k in range(4)]
    prev = Rect((2, 0, 0), (3, 4, 16))
    forward = [((k,), k, RegionRequirement(region, prev, R)) for k in range(4)] + \
        [((k,), k, RegionRequirement(region, quarter[k], WD)) for k in range(4)]
    assert _cannot_interfere(forward, False)
    backward = [((k,), k, RegionRequirement(region, prev, RED)) for k in range(4)] + \
        [((k,), k, RegionRequirement(region, quarter[k], R)) for k in range(4)]
    assert _cannot_interfere(backward, False)
    grid = [((i, j), 3 * i + j, RegionRequirement(
        region, Rect((0, 2 * i, 5 * j), (8, 2 * i + 2, 5 * j + 5)), WD))
        for i in range(2) for j in range(3)]
    assert _cannot_interfere(grid, False)
    # ... and not where a write meets a read or another write
    assert not _cannot_interfere(forward + [((4,), 4, RegionRequirement(
        region, Rect((2, 0, 0), (3, 4, 4)), WD))], False)
    assert not _cannot_interfere(grid + [grid[0]], False)
    mixed = [((0,), 0, RegionRequirement(region, prev, R)),
             ((1,), 1, RegionRequirement(region, Rect((2, 0, 0), (3, 1, 1)), RED))]
    assert not _cannot_interfere(mixed, False)
