"""RectIndex: a set of (Rect, value) items that answers "which items overlap this rect" fast.

The planner asks this question for every requirement of every point task, so it must not
scan all items. Items are hashed into a uniform grid whose cell size per dimension is a
power of two near the typical (geometric mean) extent of the items held, so parts of one
partition touch O(1) cells per split dimension, and a few slivers (halos, fragments left by
subtraction) do not shrink the cells for everyone. The grid is rebuilt when that typical
extent drifts 4x away from the cell size. Items that would touch many cells, and queries that
would visit more cells than there are items, fall back to scanning, so the cost is
min(grid walk, scan). Small sets (most buffers hold a handful of pieces) skip the grid and
are scanned directly, which is what keeps planning cheap per node.
"""
from __future__ import annotations

from itertools import product
from typing import Any, Iterator

from .geometry import Rect

_MAX_CELLS_PER_ITEM = 64
_DRIFT_BITS = 2          # rebuild when the typical extent is 4x off the cell size
_SMALL = 32              # up to this many items: no grid, scan them


class RectIndex:
    __slots__ = ("_items", "_next_id", "_cell", "_grid", "_big", "_bits", "_sized", "_exact",
                 "disjoint")

    def __init__(self, disjoint: bool = False):
        """`disjoint`: the caller promises items never overlap, so a query equal to an item's
        rect is answered by that item alone (the common case, found by a dict lookup)."""
        self.disjoint = disjoint
        self._exact: dict[Rect, int] = {}       # rect -> id of the latest item with it
        self._items: dict[int, tuple[Rect, Any]] = {}
        self._next_id = 0
        self._cell: tuple[int, ...] | None = None    # None: no grid (small or all empty)
        self._grid: dict[tuple[int, ...], set[int]] = {}
        self._big: set[int] = set()
        self._bits: list[int] | None = None     # per dimension: sum of extent.bit_length()
        self._sized = 0                          # number of non-empty items (grid mode)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[tuple[int, Rect, Any]]:
        for i, (r, v) in self._items.items():
            yield i, r, v

    def get(self, item_id: int) -> tuple[Rect, Any]:
        return self._items[item_id]

    def find_exact(self, rect: Rect) -> int | None:
        """The id of an item whose rect equals `rect`, if any."""
        return self._exact.get(rect)

    # -- grid helpers -------------------------------------------------------------------
    def _cell_ranges(self, rect: Rect) -> list[range]:
        return [range(l // c, (h - 1) // c + 1) for l, h, c in zip(rect.lo, rect.hi, self._cell)]

    @staticmethod
    def _count(ranges: list[range]) -> int:
        n = 1
        for r in ranges:
            n *= len(r)
        return n

    def _insert(self, item_id: int, rect: Rect) -> None:
        ranges = self._cell_ranges(rect)
        if self._count(ranges) > _MAX_CELLS_PER_ITEM:
            self._big.add(item_id)
            return
        grid = self._grid
        for cell in product(*ranges):
            bucket = grid.get(cell)
            if bucket is None:
                grid[cell] = {item_id}
            else:
                bucket.add(item_id)

    def _account(self, rect: Rect, sign: int) -> None:
        bits = self._bits
        for d, (l, h) in enumerate(zip(rect.lo, rect.hi)):
            bits[d] += sign * (h - l).bit_length()
        self._sized += sign

    def _build_grid(self) -> None:
        """Enter grid mode: cells follow the typical extent of the items held."""
        sized = [r for r, _ in self._items.values() if not r.empty]
        if not sized:
            self._cell = None
            return
        self._bits = [0] * sized[0].ndim
        self._sized = 0
        for r in sized:
            self._account(r, 1)
        self._rebuild()

    def _rebuild(self) -> None:
        n, bits = self._sized, self._bits
        self._cell = tuple(1 << max(0, (2 * b + n) // (2 * n) - 1) for b in bits)
        self._grid = {}
        self._big = set()
        for i, (r, _) in self._items.items():
            if not r.empty:          # empty items live only in _items (see add/remove)
                self._insert(i, r)

    # -- public API ---------------------------------------------------------------------
    def add(self, rect: Rect, value: Any) -> int:
        """Insert an item; returns its id. Empty rects are stored but never overlap anything."""
        item_id = self._next_id
        self._next_id += 1
        self._items[item_id] = (rect, value)
        self._exact[rect] = item_id
        if self._cell is None:
            if len(self._items) > _SMALL:
                self._build_grid()
            return item_id
        if rect.empty:
            return item_id
        self._account(rect, 1)
        n = self._sized
        limit = _DRIFT_BITS * n
        # A cell of 2**k has bit_length k+1; the items' mean bit_length is sum/n.
        for c, b in zip(self._cell, self._bits):
            if abs(c.bit_length() * n - b) > limit:
                self._rebuild()
                return item_id
        self._insert(item_id, rect)
        return item_id

    def remove(self, item_id: int) -> None:
        rect, _ = self._items.pop(item_id)
        if self._exact.get(rect) == item_id:
            del self._exact[rect]
        if self._cell is None or rect.empty:
            return
        self._account(rect, -1)
        if len(self._items) <= _SMALL // 2:      # back to scanning
            self._cell, self._grid, self._big = None, {}, set()
            return
        if item_id in self._big:
            self._big.discard(item_id)
            return
        grid = self._grid
        for cell in product(*self._cell_ranges(rect)):
            bucket = grid.get(cell)
            if bucket is not None:
                bucket.discard(item_id)
                if not bucket:
                    del grid[cell]

    def overlapping(self, rect: Rect) -> list[tuple[int, Rect, Any]]:
        """Items whose rect shares at least one point with `rect`, in insertion order."""
        items = self._items
        if not items or rect.empty:
            return []
        if self.disjoint:
            i = self._exact.get(rect)
            if i is not None:
                return [(i, rect, items[i][1])]
        if self._cell is None:
            return _scan(items.items(), rect)
        ranges = self._cell_ranges(rect)
        if self._count(ranges) >= len(items):
            ids = items.keys()
        else:
            found: set[int] = set(self._big)
            grid = self._grid
            for cell in product(*ranges):
                bucket = grid.get(cell)
                if bucket:
                    found.update(bucket)
            ids = sorted(found)
        return _scan(((i, items[i]) for i in ids), rect)


def _scan(entries, rect: Rect) -> list[tuple[int, Rect, Any]]:
    """The (id, rect, value) of `entries` [(id, (rect, value))] overlapping the non-empty
    `rect` (Rect.overlaps inlined: this loop runs for every query)."""
    lo, hi = rect.lo, rect.hi
    ndim = len(lo)
    out = []
    for i, (r, v) in entries:
        if r.empty:
            continue
        rlo, rhi = r.lo, r.hi
        if len(rlo) != ndim:
            r.overlaps(rect)            # raises the error naming both rects
        for a, b, c, d in zip(rlo, rhi, lo, hi):
            if a >= d or c >= b:
                break
        else:
            out.append((i, r, v))
    return out
