"""RectIndex's overlap scans and grid cells, unrolled per dimensionality (rectindex.py), against
Rect.overlaps on every dimensionality from 0 to 6, in scan mode (few items) and grid mode
(many), with rects that touch without overlapping and empty rects among the items."""
import random

import pytest

from taskrt.geometry import Rect
from taskrt.rectindex import RectIndex, overlaps_any


def random_rect(rng: random.Random, ndim: int) -> Rect:
    lo, hi = [], []
    for _ in range(ndim):
        a = rng.randrange(0, 24)
        # Mostly small parts on a shared lattice (touching neighbours), a few empty.
        b = a + rng.choice((0, 1, 2, 4, 4, 8, 8, 16)) if rng.random() < 0.95 else a
        lo.append(a)
        hi.append(b)
    return Rect(tuple(lo), tuple(hi))


@pytest.mark.parametrize("ndim", range(7))
@pytest.mark.parametrize("count", [5, 200])
def test_overlapping_equals_rect_overlaps(ndim, count):
    rng = random.Random(ndim * 1000 + count)
    index = RectIndex()
    items = {}
    for _ in range(count):
        rect = random_rect(rng, ndim)
        items[index.add(rect, None)] = rect
    for i in rng.sample(sorted(items), len(items) // 4):      # removals, then re-adds
        index.remove(i)
        del items[i]
    for _ in range(count // 4):
        rect = random_rect(rng, ndim)
        items[index.add(rect, None)] = rect
    queries = [random_rect(rng, ndim) for _ in range(300)] + list(items.values())[:50]
    for q in queries:
        want = [i for i, r in items.items() if r.overlaps(q)]
        assert [i for i, _, _ in index.overlapping(q)] == want, (ndim, count, q)


def test_touching_rects_do_not_overlap_in_the_grid():
    index = RectIndex()
    for x in range(0, 64, 2):
        for y in range(0, 8, 2):
            index.add(Rect((x, y, 0), (x + 2, y + 2, 3)), (x, y))
    assert len(index) > 32                      # grid mode
    found = index.overlapping(Rect((2, 2, 0), (4, 4, 3)))
    assert [v for _, _, v in found] == [(2, 2)]
    found = index.overlapping(Rect((3, 3, 2), (5, 5, 3)))
    assert [v for _, _, v in found] == [(2, 2), (2, 4), (4, 2), (4, 4)]


@pytest.mark.parametrize("ndim", range(7))
def test_overlaps_any_equals_rect_overlaps(ndim):
    """overlaps_any (BufferAccesses' check of a new rect against the rects seen) answers as
    any(map(rect.overlaps, rects)), touching rects and every prefix of a list included."""
    rng = random.Random(7000 + ndim)
    for _ in range(300):
        rects = [r for r in (random_rect(rng, ndim) for _ in range(rng.randrange(0, 12)))
                 if not r.empty]
        q = random_rect(rng, ndim)
        if q.empty:
            continue
        for k in range(len(rects) + 1):
            assert overlaps_any(rects[:k], q) == any(map(q.overlaps, rects[:k])), (rects[:k], q)
