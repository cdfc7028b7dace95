"""BufferAccesses against its definition, element by element: a read depends on the last
writer of each element it reads; a write on the last writer and every reader since of each
element it writes. Random access sequences over a small buffer, of the rects the planner
uses (a partition's parts, their pieces, rects across parts), in the aligned mode and the
general one (bufferaccesses.py), with reads, writes and read-writes (a read then a write
of one task) interleaved; and sequences that keep a buffer in the disjoint-writes mode a
while (pieces written, read whole or in parts, written again) before something cuts a
written piece or reads unwritten elements."""
import random

import pytest

from taskrt import bufferaccesses
from taskrt.geometry import Rect

SHAPE = (6, 8)


def _rects(rng) -> list[Rect]:
    """A partition's parts, halves of some, and a few rects across parts."""
    rows, cols = rng.choice([1, 2, 3]), rng.choice([1, 2, 4])
    parts = [Rect((r * SHAPE[0] // rows, c * SHAPE[1] // cols),
                  ((r + 1) * SHAPE[0] // rows, (c + 1) * SHAPE[1] // cols))
             for r in range(rows) for c in range(cols)]
    out = list(parts)
    for p in rng.sample(parts, min(3, len(parts))):
        mid = (p.lo[1] + p.hi[1]) // 2
        if mid > p.lo[1]:
            out.append(Rect(p.lo, (p.hi[0], mid)))
    for _ in range(3):
        lo = (rng.randrange(SHAPE[0]), rng.randrange(SHAPE[1]))
        out.append(Rect(lo, (rng.randrange(lo[0] + 1, SHAPE[0] + 1),
                             rng.randrange(lo[1] + 1, SHAPE[1] + 1))))
    return out


class Plain:
    """The definition: per element, its last writer and its readers since."""

    def __init__(self):
        self.writer: dict = {}
        self.readers: dict = {}

    def _cells(self, rect):
        return [(i, j) for i in range(rect.lo[0], rect.hi[0])
                for j in range(rect.lo[1], rect.hi[1])]

    def read(self, rect, ref) -> set:
        preds = set()
        for e in self._cells(rect):
            if e in self.writer:
                preds.add(self.writer[e])
            self.readers.setdefault(e, set()).add(ref)
        return preds

    def write(self, rect, ref) -> set:
        preds = set()
        for e in self._cells(rect):
            if e in self.writer:
                preds.add(self.writer[e])
            preds |= self.readers.pop(e, set())
            self.writer[e] = ref
        preds.discard(ref)
        return preds


@pytest.mark.parametrize("aligned, disjoint", [(True, True), (True, False), (False, False)])
def test_buffer_accesses_give_the_definitions_preds(aligned, disjoint, monkeypatch):
    monkeypatch.setattr(bufferaccesses, "DISJOINT_WRITES", disjoint)
    old = bufferaccesses.ALIGNED_BUFFERS
    bufferaccesses.ALIGNED_BUFFERS = aligned
    try:
        general = 0
        for seed in range(300):
            rng = random.Random(seed)
            rects = _rects(rng)
            buf, plain = bufferaccesses.BufferAccesses(), Plain()
            if rng.random() < 0.3:                  # initial data, written by None
                for r in rng.sample(rects, 2):
                    assert buf.write(r, None) == plain.write(r, None)
            for k in range(rng.randint(5, 60)):
                r = rng.choice(rects)
                kind = rng.random()
                if kind < 0.6:
                    assert buf.read(r, k) == plain.read(r, k), (seed, k)
                elif kind < 0.85:
                    assert buf.write(r, k) == plain.write(r, k), (seed, k)
                else:                               # a read-write task
                    assert buf.read(r, k) == plain.read(r, k), (seed, k)
                    assert buf.write(r, k) == plain.write(r, k), (seed, k)
            general += buf._w is None
        assert general > 100                        # the general mode was exercised
    finally:
        bufferaccesses.ALIGNED_BUFFERS = old


def _pieces(rng) -> tuple[list[Rect], list[Rect], list[Rect]]:
    """A grid's cells (a reader's instance written piece by piece by copies), rects made
    of whole cells (what its task reads, or a write that cuts cells), and rects inside a
    cell (a copy reading part of a producer's part)."""
    rows, cols = rng.choice([1, 2, 3]), rng.choice([2, 4])
    cells = [Rect((r * SHAPE[0] // rows, c * SHAPE[1] // cols),
                  ((r + 1) * SHAPE[0] // rows, (c + 1) * SHAPE[1] // cols))
             for r in range(rows) for c in range(cols)]
    unions = []
    for _ in range(3):
        r0, c0 = rng.randrange(rows), rng.randrange(cols)
        r1, c1 = rng.randrange(r0, rows), rng.randrange(c0, cols)
        unions.append(Rect(cells[r0 * cols + c0].lo, cells[r1 * cols + c1].hi))
    return cells, unions, [_inside(rng, cell) for cell in rng.sample(cells, min(3, len(cells)))]


def _inside(rng, rect: Rect) -> Rect:
    lo = tuple(rng.randrange(a, b) for a, b in zip(rect.lo, rect.hi))
    return Rect(lo, tuple(rng.randrange(a + 1, b + 1) for a, b in zip(lo, rect.hi)))


@pytest.mark.parametrize("disjoint, cut_reads", [(True, 64), (True, 0), (False, 64)])
def test_disjoint_writes_mode_gives_the_definitions_preds(disjoint, cut_reads, monkeypatch):
    """Reads of whole cells, of unions of written cells and of parts of cells, writes of
    cells (again), at random a write of a union (cutting cells: in the mode, or with
    `cut_reads` 0 general once a read met a cell cut) or a read of an unwritten cell, in
    the disjoint-writes mode and after it turns general."""
    monkeypatch.setattr(bufferaccesses, "DISJOINT_WRITES", disjoint)
    monkeypatch.setattr(bufferaccesses, "_CUT_READS", cut_reads)
    in_mode = left = 0
    for seed in range(400):
        rng = random.Random(seed)
        cells, unions, inner = _pieces(rng)
        buf, plain = bufferaccesses.BufferAccesses(), Plain()
        written: list[Rect] = []
        first = rng.choice(cells)                   # (an aligned buffer's first rect)
        assert buf.write(first, None) == plain.write(first, None)
        written.append(first)
        for k in range(rng.randint(10, 80)):
            was = buf._d is not None
            in_mode += was
            kind = rng.random()
            if kind < 0.3:
                r = rng.choice(cells)
                assert buf.write(r, k) == plain.write(r, k), (seed, k)
                written.append(r)
            elif kind < 0.4:
                # part of a written rect (mostly), as a copy reads a producer's part
                r = rng.choice(inner) if rng.random() < 0.05 else \
                    _inside(rng, rng.choice(written))
                assert buf.read(r, k) == plain.read(r, k), (seed, k)
            elif kind < 0.6:
                # a rect of several written cells, read whole (a task reading the pieces
                # copies wrote), sometimes written by it
                whole = [u for u in unions
                         if all(c in written for c in cells if u.contains(c))]
                r = rng.choice(whole or written)
                assert buf.read(r, k) == plain.read(r, k), (seed, k)
                if rng.random() < 0.2:
                    assert buf.write(r, k) == plain.write(r, k), (seed, k)
            elif kind < 0.9:
                # a written rect (mostly), read; sometimes by a task that writes it
                r = rng.choice(written + unions) if rng.random() < 0.03 else \
                    rng.choice(written)
                assert buf.read(r, k) == plain.read(r, k), (seed, k)
                if rng.random() < 0.2:
                    assert buf.write(r, k) == plain.write(r, k), (seed, k)
            elif kind < 0.95:
                r = rng.choice(unions)
                assert buf.write(r, k) == plain.write(r, k), (seed, k)
                written.append(r)
            elif kind < 0.98:
                r = rng.choice(written)
                assert buf.read(r, k) == plain.read(r, k), (seed, k)
            else:                                   # an empty rect (no piece is empty)
                r = Rect((1, 2), (1, 5))
                assert buf.write(r, k) == plain.write(r, k), (seed, k)
            left += was and buf._d is None
    if not disjoint:
        assert in_mode == 0
    elif cut_reads:
        assert in_mode > 6000                   # cuts kept in the mode
    else:
        assert in_mode > 2000 and left > 100    # the mode was used, and left for general
