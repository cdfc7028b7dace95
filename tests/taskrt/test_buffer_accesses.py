"""BufferAccesses against its definition, element by element: a read depends on the last
writer of each element it reads; a write on the last writer and every reader since of each
element it writes. Random access sequences over a small buffer, of the rects the planner
uses (a partition's parts, their pieces, rects across parts), in the aligned mode and the
general one (bufferaccesses.py), with reads, writes and read-writes (a read then a write
of one task) interleaved."""
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


@pytest.mark.parametrize("aligned", [True, False])
def test_buffer_accesses_give_the_definitions_preds(aligned):
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
