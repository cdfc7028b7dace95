"""Copies bring each source's pieces in as few rects as their shapes allow: valid pieces
fragmented by earlier readers are not copied fragment by fragment."""
import random
from collections import Counter

import torch

from taskrt import R, WD, LocalExecutor, Machine, Rect, Region, plan
from taskrt.geometry import merge_adjacent

from taskrt_helpers import copies, launch, one

M4 = Machine.local(4)
X = Region("x", (8, 8))
FULL = X.rect


def points(rects) -> list:
    out = []
    for r in rects:
        out += [(i, j) for i in range(r.lo[0], r.hi[0]) for j in range(r.lo[1], r.hi[1])]
    return out


def test_fragments_of_one_source_are_one_copy_and_the_reader_sees_the_data():
    """An earlier reader of a middle band (on the other rank) splits the writer's piece
    into three valid fragments; a reader of everything on the writer's rank gets one copy
    of all of it from the writer."""
    value = torch.arange(64.0).reshape(8, 8)
    seen = []
    g = plan([one("w", X, FULL, WD, 0, task=lambda ctx, _: value.clone()),
              one("band", X, Rect.of((2, 4), (0, 8)), R, 2),
              one("all", X, FULL, R, 1, task=lambda ctx, x: seen.append(x.clone()))],
             Machine.grid(2, 2))
    into_1 = [c for c in copies(g) if c.dst == 1]
    assert [(c.src, c.rect) for c in into_1] == [(0, FULL)]
    LocalExecutor(g).run()
    assert torch.equal(seen[0], value)


def test_a_gather_takes_its_pieces_from_every_holder_not_from_the_first_reader():
    """Four devices write a quarter each, then each reads everything (a tensor-parallel
    all-gather: 12 quarters to move). Taking every piece from its lowest holder makes the
    first reader send 9 of them after its own read; spreading by elements sent so far
    keeps every device within 4, and each reader still sees the whole value."""
    quarters = [Rect.of((2 * i, 2 * i + 2), (0, 8)) for i in range(4)]
    value = torch.arange(64.0).reshape(8, 8)
    seen = {}

    def write(ctx, _):
        return value[quarters[ctx.color[0]].slices_within(FULL)].clone()

    def read(ctx, x):
        seen[ctx.color[0]] = x.clone()

    g = plan([launch("w", [[(X, q, WD)] for q in quarters], [0, 1, 2, 3], write),
              launch("gather", [[(X, FULL, R)]] * 4, [0, 1, 2, 3], read)], M4)
    sent = Counter()
    for c in copies(g):
        sent[c.src] += c.rect.volume
    assert sum(sent.values()) == 12 * 16 and max(sent.values()) <= 4 * 16, sent
    LocalExecutor(g).run()
    assert all(torch.equal(seen[i], value) for i in range(4))


def test_merge_adjacent_covers_the_same_points_with_fewer_disjoint_rects():
    rng = random.Random(0)
    for _ in range(300):
        box = Rect.of((0, rng.randint(1, 6)), (0, rng.randint(1, 6)))
        pieces = [box]
        for _ in range(rng.randint(0, 3)):       # cut the box like add_holder does
            lo = (rng.randint(0, 5), rng.randint(0, 5))
            cut = Rect(lo, (lo[0] + rng.randint(1, 4), lo[1] + rng.randint(1, 4)))
            pieces = [q for p in pieces for q in ([p.intersect(cut)] + p.subtract(cut))
                      if not q.empty]
        keep = [p for p in pieces if rng.random() < 0.7]
        merged = merge_adjacent(keep)
        assert len(merged) <= max(1, len(keep))
        assert sorted(points(merged)) == sorted(points(keep))    # same points, each once
    assert merge_adjacent([Rect.of((0, 2), (0, 2)), Rect.of((2, 4), (0, 2))]) == \
        [Rect.of((0, 4), (0, 2))]
    assert len(merge_adjacent([Rect.of((0, 2), (0, 2)), Rect.of((2, 4), (1, 3))])) == 2


def _merge_by_rounds(rects):
    """merge_adjacent as it was: rounds over every dimension until a round merges nothing
    (the oracle for its early stop and line keys)."""
    from taskrt.geometry import bounding_box
    box = bounding_box(rects)
    if box is None:
        return []
    if sum(r.volume for r in rects) == box.volume:
        return [box]
    out = [r for r in rects if not r.empty]
    changed = True
    while changed and len(out) > 1:
        changed = False
        for d in range(box.ndim):
            merged = _merge_along_by_slices(out, d)
            if len(merged) < len(out):
                out, changed = merged, True
    return out


def _merge_along_by_slices(rects, d):
    """geometry._merge_along as it was (lines keyed by sliced corners, always rebuilt)."""
    lines = {}
    for r in rects:
        key = (r.lo[:d] + r.lo[d + 1:], r.hi[:d] + r.hi[d + 1:])
        lines.setdefault(key, []).append(r)
    out = []
    for line in lines.values():
        if len(line) == 1:
            out.append(line[0])
            continue
        line.sort(key=lambda r: r.lo[d])
        lo, hi = line[0].lo, line[0].hi
        for r in line[1:]:
            if r.lo[d] == hi[d]:
                hi = hi[:d] + (r.hi[d],) + hi[d + 1:]
            else:
                out.append(Rect(lo, hi))
                lo, hi = r.lo, r.hi
        out.append(Rect(lo, hi))
    return out


def test_merge_adjacent_stops_early_with_the_rounds_result():
    """merge_adjacent stops once the passes after the last merge merged nothing, and keys a
    line by its corners' other coordinates; the rects and their order are those of passing
    over every dimension until a round merges nothing, lines keyed by sliced corners,
    on fragments of 1-4 dimensional boxes cut several times (many need several rounds)."""
    rng = random.Random(1)
    several = 0
    for _ in range(3000):
        ndim = rng.randint(1, 4)
        box = Rect(tuple([0] * ndim), tuple(rng.randint(1, 6) for _ in range(ndim)))
        pieces = [box]
        for _ in range(rng.randint(1, 5)):
            lo = tuple(rng.randint(0, 5) for _ in range(ndim))
            cut = Rect(lo, tuple(a + rng.randint(1, 4) for a in lo))
            pieces = [q for p in pieces for q in ([p.intersect(cut)] + p.subtract(cut))
                      if not q.empty]
        rng.shuffle(pieces)
        keep = [p for p in pieces if rng.random() < 0.8]
        want = _merge_by_rounds(keep)
        assert merge_adjacent(keep) == want, keep
        several += len(want) < len(keep) - 1
    assert several > 300


def test_fragments_held_by_different_readers_come_from_one_holder():
    """A writer's piece cut into a checkerboard of fragments by two earlier readers (rows on
    device 1, columns on device 2: fragments held by {0}, {0, 1}, {0, 2}, {0, 1, 2}), then
    read whole on device 3 of the same rank: one copy from the writer, which holds every
    fragment. Picking a holder per fragment (least sent so far, per fragment) made 36
    copies of single rows and cells from devices 0, 1 and 2, which no merge can join
    (RegionPlanner._group_sources)."""
    value = torch.arange(64.0).reshape(8, 8)
    seen = []
    launches = [one("w", X, FULL, WD, 0, task=lambda ctx, _: value.clone())]
    launches += [one(f"row{k}", X, Rect.of((2 * k, 2 * k + 1), (0, 8)), R, 1) for k in range(4)]
    launches += [one(f"col{k}", X, Rect.of((0, 8), (2 * k, 2 * k + 1)), R, 2) for k in range(4)]
    launches += [one("all", X, FULL, R, 3, task=lambda ctx, x: seen.append(x.clone()))]
    g = plan(launches, M4)
    assert [(c.src, c.rect) for c in copies(g) if c.dst == 3] == [(0, FULL)]
    LocalExecutor(g).run()
    assert torch.equal(seen[0], value)
