"""RectIndex: a set of (Rect, value) items that answers "which items overlap this rect" fast.

The planner asks this question for every requirement of every point task, so it must not
scan all items. Items are hashed into a uniform grid whose cell size per dimension is a
power of two near the typical (geometric mean) extent of the items held, so parts of one
partition touch O(1) cells per split dimension, and a few slivers (halos, fragments left by
subtraction) do not shrink the cells for everyone. The grid is rebuilt when that typical
extent drifts 4x away from the cell size. Items that would touch many cells, and queries that
would visit more cells than there are items, fall back to scanning, so the cost is
min(grid walk, scan).
"""
from __future__ import annotations

from itertools import product
from typing import Any, Iterator

from .geometry import Rect

_MAX_CELLS_PER_ITEM = 64
_DRIFT_BITS = 2          # rebuild when the typical extent is 4x off the cell size


class RectIndex:
    __slots__ = ("_items", "_next_id", "_cell", "_grid", "_big", "_bits", "_sized")

    def __init__(self):
        self._items: dict[int, tuple[Rect, Any]] = {}
        self._next_id = 0
        self._cell: tuple[int, ...] | None = None
        self._grid: dict[tuple[int, ...], set[int]] = {}
        self._big: set[int] = set()
        self._bits: list[int] | None = None     # per dimension: sum of extent.bit_length()
        self._sized = 0                          # number of non-empty items

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[tuple[int, Rect, Any]]:
        for i, (r, v) in self._items.items():
            yield i, r, v

    def get(self, item_id: int) -> tuple[Rect, Any]:
        return self._items[item_id]

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

    def _rebuild(self, cell: tuple[int, ...]) -> None:
        self._cell = cell
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
        if rect.empty:
            return item_id
        bits = self._bits
        if bits is None:
            bits = self._bits = [0] * rect.ndim
        for d, (l, h) in enumerate(zip(rect.lo, rect.hi)):
            bits[d] += (h - l).bit_length()
        n = self._sized = self._sized + 1
        cell = self._cell
        # A cell of 2**k has bit_length k+1; the items' mean bit_length is sum/n.
        if cell is None or any(abs(c.bit_length() * n - b) > _DRIFT_BITS * n
                               for c, b in zip(cell, bits)):
            self._rebuild(tuple(1 << max(0, (2 * b + n) // (2 * n) - 1) for b in bits))
            return item_id
        self._insert(item_id, rect)
        return item_id

    def remove(self, item_id: int) -> None:
        rect, _ = self._items.pop(item_id)
        if rect.empty:
            return
        self._sized -= 1
        for d, (l, h) in enumerate(zip(rect.lo, rect.hi)):
            self._bits[d] -= (h - l).bit_length()
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
        if rect.empty or self._cell is None:     # no cell yet: every item is empty
            return []
        items = self._items
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
        out = []
        for i in ids:
            r, v = items[i]
            if r.overlaps(rect):
                out.append((i, r, v))
        return out
