"""Rect algebra: unit tests, and hypothesis properties checked against brute-force point sets."""
from itertools import product

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from taskrt import Rect, RectError, bounding_box, subtract_all
from taskrt.geometry import rect_mover

SETTINGS = settings(max_examples=150, deadline=None)


def points(r: Rect) -> set:
    """Every integer point of r (the brute-force model of a rect)."""
    return set(product(*(range(l, h) for l, h in zip(r.lo, r.hi))))


@st.composite
def rects(draw, ndim=None, lo=-3, hi=7, allow_empty=True):
    n = draw(st.integers(1, 3)) if ndim is None else ndim
    los, his = [], []
    for _ in range(n):
        a = draw(st.integers(lo, hi))
        b = draw(st.integers(lo if allow_empty else a + 1, hi + 1))
        los.append(a)
        his.append(b)
    return Rect(tuple(los), tuple(his))


@st.composite
def rect_pairs(draw, allow_empty=True):
    n = draw(st.integers(1, 3))
    return (draw(rects(ndim=n, allow_empty=allow_empty)),
            draw(rects(ndim=n, allow_empty=allow_empty)))


# -- unit tests -------------------------------------------------------------------------------

def test_constructors_and_str():
    r = Rect.from_shape((2, 3))
    assert r == Rect((0, 0), (2, 3)) == Rect.of((0, 2), (0, 3))
    assert str(r) == "[0:2,0:3]" and repr(r) == "[0:2,0:3]"
    assert r.ndim == 2 and r.shape == (2, 3) and r.volume == 6 and not r.empty


def test_empty_rects():
    e = Rect((3, 0), (1, 5))
    assert e.empty and e.volume == 0 and e.shape == (0, 5)
    assert Rect((0,), (0,)).empty
    full = Rect.from_shape((4, 4))
    assert full.contains(e)                  # an empty rect is inside anything
    assert not e.overlaps(full) and not full.overlaps(e)
    assert e.subtract(full) == []
    assert full.subtract(e) == [full]
    assert full.union_bbox(e) == full and e.union_bbox(full) == full


def test_mismatched_lengths_and_dims():
    with pytest.raises(RectError, match=r"lo \(0, 0\) and hi \(1,\) have different lengths"):
        Rect((0, 0), (1,))
    a, b = Rect((0,), (4,)), Rect((0, 0), (4, 4))
    for op in (a.intersect, a.overlaps, a.contains):
        with pytest.raises(RectError, match=r"different dimensionality \(1 vs 2\)"):
            op(b)


def test_touching_is_not_overlapping():
    a = Rect.of((0, 4), (0, 4))
    assert not a.overlaps(Rect.of((4, 8), (0, 4)))      # shares an edge
    assert not a.overlaps(Rect.of((4, 8), (4, 8)))      # shares a corner
    assert a.overlaps(Rect.of((3, 8), (3, 8)))
    assert a.intersect(Rect.of((4, 8), (0, 4))).empty


def test_subtract_example():
    a = Rect.of((0, 4), (0, 4))
    pieces = a.subtract(Rect.of((1, 3), (1, 3)))
    assert len(pieces) == 4
    assert sum(p.volume for p in pieces) == 12
    assert a.subtract(Rect.of((10, 12), (0, 4))) == [a]
    assert a.subtract(a) == []


def test_slices_within_and_error():
    c = Rect.of((2, 6), (10, 14))
    assert Rect.of((3, 5), (10, 12)).slices_within(c) == (slice(1, 3), slice(0, 2))
    with pytest.raises(RectError, match=r"Rect \[1:3,10:12\] is not inside \[2:6,10:14\]"):
        Rect.of((1, 3), (10, 12)).slices_within(c)


def test_translate_contains_point_bounding_box():
    r = Rect.of((0, 2), (1, 3)).translate((5, -1))
    assert r == Rect.of((5, 7), (0, 2))
    assert r.contains_point((5, 1)) and not r.contains_point((7, 1))
    assert bounding_box([]) is None
    assert bounding_box([Rect((3,), (1,))]) is None
    assert bounding_box([Rect((0,), (2,)), Rect((5,), (4,)), Rect((6,), (9,))]) == Rect((0,), (9,))


# -- properties against point sets ------------------------------------------------------------

@SETTINGS
@given(rect_pairs())
def test_intersect_overlaps_contains_volume(pair):
    a, b = pair
    pa, pb = points(a), points(b)
    assert a.volume == len(pa) and a.empty == (not pa)
    inter = a.intersect(b)
    assert points(inter) == pa & pb
    assert inter == b.intersect(a)
    assert a.overlaps(b) == bool(pa & pb) == b.overlaps(a) == (inter.volume > 0)
    assert a.contains(b) == (pb <= pa)
    if not inter.empty:
        assert a.contains(inter) and b.contains(inter)


def _subtract_in_order(a: Rect, b: Rect) -> list:
    """Rect.subtract's pieces written out plainly: per dimension in order, the part below the
    intersection, then the part above, limited to the intersection in earlier dimensions."""
    inter = Rect(tuple(map(max, a.lo, b.lo)), tuple(map(min, a.hi, b.hi)))
    if inter.empty:
        return [] if a.empty else [a]
    pieces, lo, hi = [], list(a.lo), list(a.hi)
    for d in range(a.ndim):
        if lo[d] < inter.lo[d]:
            pieces.append(Rect(tuple(lo), tuple(hi[:d] + [inter.lo[d]] + hi[d + 1:])))
        if inter.hi[d] < hi[d]:
            pieces.append(Rect(tuple(lo[:d] + [inter.hi[d]] + lo[d + 1:]), tuple(hi)))
        lo[d], hi[d] = inter.lo[d], inter.hi[d]
    return pieces


@SETTINGS
@given(rect_pairs())
def test_subtract_and_intersect_give_the_planners_order_and_objects(pair):
    """The planner's graphs depend on the order of subtract's pieces (golden digests), and
    on intersect handing back an operand it equals (no new object)."""
    a, b = pair
    assert a.subtract(b) == _subtract_in_order(a, b)
    inter = a.intersect(b)
    if inter == a:
        assert inter is a
    elif inter == b:
        assert inter is b


@SETTINGS
@given(rect_pairs())
def test_subtract_pieces(pair):
    a, b = pair
    pieces = a.subtract(b)
    assert len(pieces) <= 2 * a.ndim
    covered = set()
    for i, p in enumerate(pieces):
        assert not p.empty
        assert a.contains(p)                                      # inside self
        assert not p.overlaps(b)                                  # disjoint from other
        for q in pieces[i + 1:]:
            assert not p.overlaps(q)                              # pairwise disjoint
        covered |= points(p)
    assert covered == points(a) - points(b)                       # exactly a minus b
    assert sum(p.volume for p in pieces) + a.intersect(b).volume == a.volume


@SETTINGS
@given(rect_pairs())
def test_union_bbox(pair):
    a, b = pair
    box = a.union_bbox(b)
    assert box.contains(a) and box.contains(b)
    if not a.empty and not b.empty:
        assert box == bounding_box([a, b])
        assert box.lo == tuple(map(min, a.lo, b.lo)) and box.hi == tuple(map(max, a.hi, b.hi))


@SETTINGS
@given(st.data())
def test_slices_within_matches_numpy(data):
    container = data.draw(rects(allow_empty=False))
    n = container.ndim
    # A sub-rect of the container (possibly empty along a dimension).
    lo, hi = [], []
    for d in range(n):
        a = data.draw(st.integers(container.lo[d], container.hi[d]))
        b = data.draw(st.integers(a, container.hi[d]))
        lo.append(a)
        hi.append(b)
    sub = Rect(tuple(lo), tuple(hi))
    # Encode each element's global coordinates in its value.
    grids = np.meshgrid(*(np.arange(l, h) for l, h in zip(container.lo, container.hi)),
                        indexing="ij")
    code = sum(g * 100 ** k for k, g in enumerate(grids))
    got = code[sub.slices_within(container)]
    sub_grids = np.meshgrid(*(np.arange(l, h) for l, h in zip(sub.lo, sub.hi)), indexing="ij")
    want = sum(g * 100 ** k for k, g in enumerate(sub_grids))
    assert got.shape == sub.shape
    assert np.array_equal(got, want)


@SETTINGS
@given(st.data())
def test_subtract_all_covers_rect_minus_union(data):
    n = data.draw(st.integers(1, 3))
    rect = data.draw(rects(ndim=n))
    others = data.draw(st.lists(rects(ndim=n), max_size=5))
    pieces = subtract_all(rect, others)
    want = points(rect)
    for o in others:
        want -= points(o)
    got = set()
    for i, p in enumerate(pieces):
        assert not p.empty and rect.contains(p)
        assert not any(p.overlaps(o) for o in others)
        assert not any(p.overlaps(q) for q in pieces[i + 1:])
        got |= points(p)
    assert got == want


def test_unrolled_intersect_and_subtract_equal_the_generic_loops(monkeypatch):
    """Rect.intersect and Rect.subtract run code unrolled per dimensionality (0 to 8
    dimensions); the generic loops (forced with _UNROLLED = 0) are the oracle: the same
    pieces in the same order, the same objects handed back, the same volumes."""
    import random

    import taskrt.geometry as geometry
    rng = random.Random(0)
    cases = []
    for _ in range(6000):
        n = rng.randrange(0, geometry._UNROLLED)
        lo = [tuple(rng.randrange(-2, 5) for _ in range(n)) for _ in range(2)]
        hi = [tuple(x + rng.randrange(-1, 4) for x in los) for los in lo]
        cases.append((Rect(lo[0], hi[0]), Rect(lo[1], hi[1])))
    got = [(a.intersect(b), a.subtract(b)) for a, b in cases]
    monkeypatch.setattr(geometry, "_UNROLLED", 0)
    for (a, b), (inter, pieces) in zip(cases, got):
        want_inter, want_pieces = a.intersect(b), a.subtract(b)
        assert inter == want_inter and (inter is a) == (want_inter is a) and \
            (inter is b) == (want_inter is b), (a, b)
        assert pieces == want_pieces and \
            [p is a for p in pieces] == [p is a for p in want_pieces], (a, b)
        # (results are made without __init__: their cached facts must be __init__'s)
        assert [(p.volume, p.empty) for p in [inter] + pieces] == \
            [(p.volume, p.empty) for p in [want_inter] + want_pieces], (a, b)


def test_rects_made_by_every_path_are_immutable_rects():
    """Rect(), from_shape and the unrolled operations' results (geometry._made: fields
    stored on a _FreshRect, then the class Rect) are Rects that refuse changes."""
    a, b = Rect((0, 0), (4, 4)), Rect((2, 1), (6, 3))
    made = [a, Rect.from_shape((3, 5)), a.intersect(b), a.union_bbox(b), *a.subtract(b)]
    for r in made:
        assert type(r) is Rect
        with pytest.raises(AttributeError, match="immutable"):
            r.lo = (1, 1)
    assert a.intersect(b) == Rect((2, 1), (4, 3)) and a.intersect(b).volume == 4


@SETTINGS
@given(st.data())
def test_rect_mover_equals_a_rect_made_at_the_moved_bounds(data):
    """rect_mover's rects (made with the moved rect's volume, no checks) equal Rect() at the
    moved bounds in every field the planner reads, empty rects included, one per rect."""
    r = data.draw(rects())
    axis = data.draw(st.integers(0, len(r.lo) - 1))
    delta = data.draw(st.integers(-5, 5))
    move = rect_mover(axis, delta)
    got = move(r)
    lo, hi = list(r.lo), list(r.hi)
    lo[axis] += delta
    hi[axis] += delta
    want = Rect(tuple(lo), tuple(hi))
    assert type(got) is Rect and got == want and hash(got) == hash(want)
    assert (got.lo, got.hi, got.volume, got.empty) == (want.lo, want.hi, want.volume, want.empty)
    assert move(r) is got
