"""BufferRects: a TaskGraph's bounding rect of each region's buffer on each device, kept per
region (TaskGraph.instance_rects, partial_rects).

A mapping (region name, device) -> Rect, as a dict would be, iterated region by region
(regions in the order of their first entry, a region's buffers in the order entered: a
graph's buffers are entered region by region, so that is the dict's order). It is held as one list of (device, rect)
pairs per region, so that regions planned alike (taskrt/regionclasses.py: they share one
RegionPlanner, hence one such list) are added in one step each and whole-graph passes
(bufferuses.BufferUses) work once per distinct list: GPT-3 2.7B data parallel on 1,024 GPUs
has ~2.6M (region, device) buffers, a few hundred distinct lists. A region's lookup
table is made on its first lookup.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Iterator

from .geometry import Rect


class BufferRects(Mapping):
    """(region name, device) -> Rect; `per_region()` gives the lists as added."""
    __slots__ = ("_pairs", "_index", "_len")

    def __init__(self):
        self._pairs: dict[str, list[tuple[int, Rect]]] = {}   # name -> [(device, rect)]
        self._index: dict[str, dict[int, Rect]] = {}           # name -> {device: rect}
        self._len = 0

    def add_region(self, name: str, pairs: list[tuple[int, Rect]]) -> None:
        """Region `name`'s buffers: (device, rect) pairs, one per device, in order. The list
        is kept as it is (it may be shared with regions planned alike: never changed)."""
        if name in self._pairs:
            raise KeyError(f"BufferRects: region '{name}' added twice.")
        if pairs:
            self._pairs[name] = pairs
            self._len += len(pairs)

    def per_region(self):
        """(region name, [(device, rect)]) per region, in order (lists possibly shared)."""
        return self._pairs.items()

    def _table(self, name: str) -> dict[int, Rect] | None:
        table = self._index.get(name)
        if table is None:
            pairs = self._pairs.get(name)
            if pairs is None:
                return None
            table = self._index[name] = dict(pairs)
        return table

    def __getitem__(self, key: tuple[str, int]) -> Rect:
        table = self._table(key[0])
        if table is None:
            raise KeyError(key)
        return table[key[1]]

    def __setitem__(self, key: tuple[str, int], rect: Rect) -> None:
        """Set one buffer's rect (hand-built graphs): the region's list is copied first."""
        name, dev = key
        table = self._table(name)
        pairs = list(self._pairs.get(name, ()))
        if table is not None and dev in table:
            pairs = [(d, rect if d == dev else r) for d, r in pairs]
        else:
            pairs.append((dev, rect))
            self._len += 1
        self._pairs[name] = pairs
        self._index.pop(name, None)

    def __contains__(self, key) -> bool:
        try:
            name, dev = key
        except (TypeError, ValueError):
            return False
        table = self._table(name)
        return table is not None and dev in table

    def __iter__(self) -> Iterator[tuple[str, int]]:
        for name, pairs in self._pairs.items():
            for dev, _ in pairs:
                yield name, dev

    def __len__(self) -> int:
        return self._len

    def items(self):
        return [((name, dev), rect) for name, pairs in self._pairs.items()
                for dev, rect in pairs]

    def values(self):
        return [rect for pairs in self._pairs.values() for _, rect in pairs]

    def __repr__(self) -> str:
        return f"BufferRects({dict(self.items())!r})"
