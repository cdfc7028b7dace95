"""Copies bring each source's pieces in as few rects as their shapes allow: valid pieces
fragmented by earlier readers are not copied fragment by fragment."""
import random

import torch

from taskrt import R, WD, LocalExecutor, Machine, Rect, Region, plan
from taskrt.geometry import merge_adjacent

from taskrt_helpers import copies, one

M4 = Machine.local(4)
X = Region("x", (8, 8))
FULL = X.rect


def points(rects) -> list:
    out = []
    for r in rects:
        out += [(i, j) for i in range(r.lo[0], r.hi[0]) for j in range(r.lo[1], r.hi[1])]
    return out


def test_fragments_of_one_source_are_one_copy_and_the_reader_sees_the_data():
    """An earlier reader of a middle band splits the writer's piece into three valid
    fragments; a reader of everything on another device gets one copy of all of it."""
    value = torch.arange(64.0).reshape(8, 8)
    seen = []
    g = plan([one("w", X, FULL, WD, 0, task=lambda ctx, _: value.clone()),
              one("band", X, Rect.of((2, 4), (0, 8)), R, 1),
              one("all", X, FULL, R, 2, task=lambda ctx, x: seen.append(x.clone()))], M4)
    into_2 = [c for c in copies(g) if c.dst == 2]
    assert [(c.src, c.rect) for c in into_2] == [(0, FULL)]
    LocalExecutor(g).run()
    assert torch.equal(seen[0], value)


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
