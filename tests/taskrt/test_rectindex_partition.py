"""RectIndex against a brute-force scan, and block_rect against torch.tensor_split."""
import itertools
import random
from itertools import product

import pytest
import torch
from hypothesis import given, settings, strategies as st

from taskrt import PartitionError, Rect, RectError, Region, block_bounds, block_rect
from taskrt import rectindex
from taskrt.rectindex import RectIndex

# -- RectIndex --------------------------------------------------------------------------------


@st.composite
def index_rects(draw, ndim):
    """Rects of very different sizes (so cells shrink and rebuilds happen), big rects (more
    than 64 cells: stored aside) and empty ones; negative coordinates included."""
    kind = draw(st.sampled_from(["small", "medium", "big", "empty"]))
    lo, hi = [], []
    for _ in range(ndim):
        a = draw(st.integers(-20, 60))
        if kind == "small":
            b = a + draw(st.integers(1, 3))
        elif kind == "medium":
            b = a + draw(st.integers(4, 16))
        elif kind == "big":
            b = a + draw(st.integers(30, 90))
        else:
            b = a - draw(st.integers(0, 3))
        lo.append(a)
        hi.append(b)
    return Rect(tuple(lo), tuple(hi))


@st.composite
def index_ops(draw):
    ndim = draw(st.integers(1, 3))
    ops = draw(st.lists(st.tuples(st.sampled_from(["add", "add", "remove", "query"]),
                                  index_rects(ndim), st.integers(0, 1000)),
                        min_size=1, max_size=60))
    return ops


@settings(max_examples=200, deadline=None)
@given(index_ops())
def test_rectindex_equals_brute_force(ops):
    index = RectIndex()
    model: dict[int, tuple[Rect, object]] = {}        # insertion-ordered, like the index
    for op, rect, k in ops:
        if op == "add":
            value = ("v", k)
            i = index.add(rect, value)
            assert i not in model
            model[i] = (rect, value)
        elif op == "remove" and model:
            i = list(model)[k % len(model)]
            index.remove(i)
            del model[i]
        # Every step: a query (the drawn rect) must equal a scan of the model, in order.
        want = [(i, r, v) for i, (r, v) in model.items() if r.overlaps(rect)]
        assert index.overlapping(rect) == want
        assert len(index) == len(model)
        assert sorted((i, r, v) for i, r, v in index) == sorted(
            (i, r, v) for i, (r, v) in model.items())
    for i, (r, v) in model.items():
        assert index.get(i) == (r, v)


def test_rectindex_empty_items_regressions():
    # Only empty items inserted: no grid yet, a query must simply find nothing.
    ix = RectIndex()
    ix.add(Rect((4,), (4,)), "e")
    assert ix.overlapping(Rect((0,), (8,))) == []
    # An empty item that a later rebuild must not put into the grid (it could not be removed).
    ix = RectIndex()
    e = ix.add(Rect((4,), (4,)), "e")
    ix.add(Rect((0,), (8,)), "x")
    ix.add(Rect((8,), (16,)), "y")
    ix.remove(e)
    assert [v for _, _, v in ix.overlapping(Rect((0,), (1,)))] == ["x"]


def test_rectindex_does_not_scan_everything():
    """Disjoint parts of one partition: a query touches O(1) cells, not every item."""
    ix = RectIndex()
    for i in range(10_000):
        ix.add(Rect((i * 4,), (i * 4 + 4,)), i)
    assert len(ix._grid) == 10_000 and not ix._big
    assert [v for _, _, v in ix.overlapping(Rect((401,), (409,)))] == [100, 101, 102]


def test_rectindex_cells_follow_the_typical_extent():
    """A few slivers do not shrink the cells for everyone; a new typical size rebuilds them."""
    ix = RectIndex()
    ids = [ix.add(Rect((32 * i, 0), (32 * i + 32, 64)), i) for i in range(100)]
    ix.add(Rect((5, 0), (6, 64)), "sliver")
    assert ix._cell == (32, 64)
    assert len(ix.overlapping(Rect((40, 0), (41, 1)))) == 1
    for i in ids:
        ix.remove(i)
    for i in range(100):
        ix.add(Rect((2 * i, 0), (2 * i + 2, 2)), i)
    assert ix._cell[0] == 2 and ix._cell[1] <= 4       # within 4x of the typical extent
    assert [v for _, _, v in ix.overlapping(Rect((5, 0), (6, 1)))] == ["sliver", 2]


@pytest.mark.parametrize("grid_rule", ["cost", "at insertion"])
def test_rectindex_of_partition_fragments_equals_brute_force(grid_rule):
    """What the planner's indexes hold: the parts of block partitions of one 4-d region, cut
    into fragments by the parts of another partition (one-cell and many-cell items, the grid
    entered and left), queried with parts and fragments; every answer equals a scan."""
    rng = random.Random(3)
    shape = (16, 64, 35, 35)
    index = RectIndex(disjoint=True, grid_on_demand=grid_rule == "cost")
    model: dict[int, Rect] = {}
    for step in range(12):
        colors = tuple(rng.choice([1, 2, 4, 8, 16][:k]) for k in (5, 4, 2, 2))
        parts = [block_rect(shape, colors, c) for c in itertools.product(
            *(range(n) for n in colors))]
        for part in parts:
            hits = index.overlapping(part)
            assert hits == [(i, r, v) for i, (r, v) in
                            ((i, (r, None)) for i, r in model.items()) if r.overlaps(part)]
            for i, r, _ in hits:            # cut the items: the part replaces what it covers
                index.remove(i)
                del model[i]
                for piece in r.subtract(part):
                    model[index.add(piece, None)] = piece
            model[index.add(part, None)] = part
        if step % 3 == 2:                   # back to a few items: the index scans again
            for i in list(model)[:-8]:
                index.remove(i)
                del model[i]
    assert sorted(i for i, _, _ in index) == sorted(model)


def test_rectindex_items_over_many_cells_are_found_by_one_cell_queries():
    """Items too big for the grid (kept aside) are in every answer they overlap, also when
    the query fits in one cell (its own fast path)."""
    shape = (16, 64, 35, 35)
    index = RectIndex()
    model = {}
    for c in itertools.product(range(16), range(16)):
        part = block_rect(shape, (16, 16, 1, 1), c + (0, 0))
        model[index.add(part, c)] = (part, c)
    whole = Rect.from_shape(shape)
    model[index.add(whole, "whole")] = (whole, "whole")
    assert index._big
    for query in (block_rect(shape, (16, 16, 1, 1), (3, 5, 0, 0)), Rect((3, 20, 1, 1),
                                                                        (4, 21, 2, 2))):
        assert index.overlapping(query) == [(i, r, v) for i, (r, v) in model.items()
                                            if r.overlaps(query)]


def test_rectindex_rejects_rects_of_another_dimensionality():
    index = RectIndex()
    index.add(Rect((0, 0), (4, 4)), "a")
    with pytest.raises(RectError, match=r"different dimensionality \(2 vs 1\)"):
        index.add(Rect((0,), (4,)), "b")
    with pytest.raises(RectError, match=r"different dimensionality \(2 vs 3\)"):
        index.overlapping(Rect((0, 0, 0), (1, 1, 1)))


# -- Block parts ------------------------------------------------------------------------------


@settings(max_examples=120, deadline=None)
@given(st.data())
def test_blocks_match_tensor_split(data):
    ndim = data.draw(st.integers(1, 3))
    shape = tuple(data.draw(st.integers(1, 9)) for _ in range(ndim))
    degrees = tuple(data.draw(st.integers(1, s)) for s in shape)
    region = Region("x", shape)
    colors = list(product(*(range(d) for d in degrees)))
    x = torch.arange(region.rect.volume).reshape(shape)
    want = {(): x}
    for d, deg in enumerate(degrees):          # split dimension by dimension, colors row-major
        want = {c + (k,): piece for c, t in want.items()
                for k, piece in enumerate(torch.tensor_split(t, deg, dim=d))}
    assert colors == list(want)
    for color in colors:
        rect = block_rect(shape, degrees, color)
        assert torch.equal(x[rect.slices_within(region.rect)], want[color]), (color, rect)


@pytest.mark.parametrize("extent,degree", [(10, 3), (7, 7), (5, 1), (9, 4)])
def test_block_bounds_balanced(extent, degree):
    sizes = [block_bounds(extent, degree, i) for i in range(degree)]
    assert sizes[0][0] == 0 and sizes[-1][1] == extent
    assert all(a[1] == b[0] for a, b in zip(sizes, sizes[1:]))
    lengths = [h - l for l, h in sizes]
    assert max(lengths) - min(lengths) <= 1 and lengths == sorted(lengths, reverse=True)


def test_region_validation():
    with pytest.raises(PartitionError, match=r"Region 'w': unknown dtype 'float128'"):
        Region("w", (2,), "float128")
    with pytest.raises(PartitionError, match=r"shape \(2, -1\) must be non-negative"):
        Region("w", (2, -1))
    assert Region("w", (2, 3), "float64").nbytes() == 48


def test_rectindex_grid_built_when_its_queries_pay_for_it():
    """Made with grid_on_demand, up to _LARGE items an index scans until its scans have cost
    more than a grid would have (rectindex._grid_pays): an index mostly added to (the valid
    pieces a re-plan cuts) stays a scan, one queried often gets its grid in the middle of a
    query, and past _LARGE items the grid is built at insertion. Every answer equals a
    brute-force scan."""
    rng = random.Random(5)
    rects = [Rect((x, y), (x + 4, y + 4)) for x in range(0, 40, 4) for y in range(0, 40, 4)]
    index = RectIndex(disjoint=True, grid_on_demand=True)
    model = {}
    for r in rects:                         # 100 items, no queries: no grid
        model[index.add(r, None)] = r
    assert index._cell is None
    built_at = None
    for q in range(200):
        x, y = rng.randrange(0, 40), rng.randrange(0, 40)
        query = Rect((x, y), (x + rng.randrange(1, 9), y + rng.randrange(1, 9)))
        assert index.overlapping(query) == [(i, r, None) for i, r in model.items()
                                            if r.overlaps(query)]
        if built_at is None and index._cell is not None:
            built_at = q
    assert built_at is not None and built_at > 0      # built by a query, after some scans
    added = RectIndex(grid_on_demand=True)
    for r in rects:                         # adds outweigh the queries: it stays a scan
        added.add(r, None)
        added.overlapping(r)
        for _ in range(9):
            added.remove(added.add(Rect((100, 100), (101, 101)), None))
    assert added._cell is None
    assert RectIndex(grid_on_demand=False)._grid_at == rectindex._SMALL
    big = RectIndex(grid_on_demand=True)
    for k in range(rectindex._LARGE + 1):
        big.add(Rect((4 * k, 0), (4 * k + 4, 4)), k)
    assert big._cell is not None
    assert [v for _, _, v in big.overlapping(Rect((9, 1), (13, 2)))] == [2, 3]



def test_on_demand_grid_cells_are_twice_the_typical_extent_and_follow_it():
    """A grid_on_demand index (a region's valid pieces) has cells 2**_COARSER times those of an
    ordinary index of the same items (their typical extent), and its drift check measures
    that extent, not the cell: as the items grow 8x both rebuild at the same steps, so the
    cells stay in that ratio. (A check measuring the coarser cell would rebuild later, or
    not at all, leaving cells smaller than the items.) Every answer equals a brute-force
    scan."""
    def square(side, k, at=0):
        return Rect((at + side * k, 0), (at + side * k + side, side))

    factor = 1 << rectindex._COARSER
    coarse, plain = RectIndex(disjoint=True, grid_on_demand=True), RectIndex(disjoint=True)
    model = {}
    for k in range(rectindex._LARGE + 8):
        model[coarse.add(square(8, k), None)] = plain.add(square(8, k), None)
    assert plain._cell == (8, 8) and coarse._cell == (8 * factor, 8 * factor)
    rebuilds = set()
    for k, i in enumerate(list(model)):        # the small items go, items 8x larger come
        coarse.remove(i)
        plain.remove(model.pop(i))
        r = square(64, k, at=100_000)
        model[coarse.add(r, None)] = plain.add(r, None)
        assert coarse._cell == tuple(factor * c for c in plain._cell)
        rebuilds.add(plain._cell)
    assert len(rebuilds) > 1                    # (the ordinary index followed the extent)
    for query in (Rect((100_000, 0), (100_200, 30)), Rect((100_500, 10), (101_000, 70))):
        found = coarse.overlapping(query)
        assert found == [(i, r, None) for i, (r, _) in coarse._items.items()
                         if r.overlaps(query)]
        assert [r for _, r, _ in found] == [r for _, r, _ in plain.overlapping(query)]
