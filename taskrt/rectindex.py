"""RectIndex: a set of (Rect, value) items that answers "which items overlap this rect" fast.

The planner asks this question for every requirement of every point task, so it must not
scan all items. Items are hashed into a uniform grid whose cell size per dimension is a
power of two near the typical (geometric mean) extent of the items held (the smallest power
of two that holds it), so parts of one partition touch 1-2 cells per dimension, and a few slivers (halos, fragments left by
subtraction) do not shrink the cells for everyone. The grid is rebuilt when that typical
extent drifts 4x away from the cell size (checked every 8th insertion). A grid item keeps
its cells (a removal does not work them out again), and renew/replace move an item to the
end of the insertion order in one step, as remove + add would. Items that would
touch many cells, and queries that would visit more cells than there are items, fall back
to scanning, so the cost is
min(grid walk, scan). Small sets (most buffers hold a handful of pieces) skip the grid and
are scanned directly, which is what keeps planning cheap per node. An index made with
`grid_on_demand` (a region's valid pieces) gets the grid, up to _LARGE items, only once its
queries have paid for it (_grid_pays): a grid makes each insertion dearer, and the valid
pieces a re-plan cuts are inserted ~8 times per query. Its cells are also twice the typical
extent per dimension (_COARSER): its items are the fragments earlier reads cut (a piece
touched ~5 cells of its own size), its queries whole read rects.
"""
from __future__ import annotations

from itertools import product
from typing import Any, Iterator

from .geometry import Rect

_MAX_CELLS_PER_ITEM = 64
_DRIFT_BITS = 2          # rebuild when the typical extent is 4x off the cell size
_SMALL = 32              # up to this many items: no grid, scan them
_LARGE = 512             # past this many items: a grid, whatever the queries
# Between the two, the grid is built when the items scanned so far (while there were more
# than _SMALL) exceed what a grid would have cost instead, in scanned items (~0.06 us each
# in the unrolled scan): a grid query ~0.7 us, and each add, remove or renew ~1-2 us more
# than in a scanned set (its cells, its buckets). Grid or scan, the answers are the same
# (insertion order), so this decides only the cost.
_GRID_QUERY = 10
_GRID_UPDATE = 20
_DRIFT_CHECK_EVERY = 7   # check for drift when the item count is a multiple of 8
# A grid_on_demand index's cells: 2**_COARSER times the typical extent per dimension (drift
# is still measured from the typical extent). Each add, remove and renew of a fragment then
# touches fewer cells (a cut piece ~5 of its own size), each query visits fewer, and the
# pick tests a few more items: at Inception@16, 200 random changes, 1.1-2.1% less CPU in all
# (the slowest 10%: 5-6%), ResNet 1%, NMT unchanged (tools/ab_methods.py, docs/design.md).
_COARSER = 1
_KEEP = object()         # renew(): keep the item's value


class RectIndex:
    __slots__ = ("_items", "_next_id", "_cell", "_grid", "_big", "_bits", "_sized", "_exact",
                 "_ones", "_first", "disjoint", "_home", "_span", "_ndim", "_scan_fn",
                 "_pick_fn", "_scanned", "_queries", "_updates", "_grid_at", "_cells",
                 "_coarse")

    def __init__(self, disjoint: bool = False, grid_on_demand: bool = False,
                 exact: bool = True):
        """`disjoint`: the caller promises items never overlap, so a query equal to an item's
        rect is answered by that item alone (the common case, found by a dict lookup).
        `grid_on_demand`: up to _LARGE items, the grid is built by a query once scanning has
        cost more than it would have (_grid_pays), not at _SMALL items. `exact=False` (not
        with `disjoint`): no find_exact / exact_value, and no rect -> id table kept for them
        (a hash and a dict update less per add, remove, renew and replace: PendingSums)."""
        self.disjoint = disjoint
        # rect -> id of the latest item with it (None: not kept)
        self._exact: dict[Rect, int] | None = {} if exact or disjoint else None
        self._items: dict[int, tuple[Rect, Any]] = {}
        self._next_id = 0
        self._cell: tuple[int, ...] | None = None    # None: no grid (small or all empty)
        self._grid: dict[tuple[int, ...], set[int]] = {}
        self._big: set[int] = set()
        # Grid mode: per item in the grid, its one cell, or the list of its cells (items in
        # _big have none), so a removal need not work them out again.
        self._home: dict[int, Any] = {}
        # Per dimension, the sum of the items' cell_bits, packed (_packed_bits) into one int.
        self._bits = 0
        self._sized = 0                          # number of non-empty items (grid mode)
        self._ones = None                        # _packed_bits(ndim) (grid mode)
        self._span = None                        # _spanner(ndim) (grid mode)
        self._cells = None                       # _celler(ndim) (grid mode)
        self._first: Rect | None = None          # the first item's rect: all have its ndim
        self._ndim = -1                          # its ndim; the query loops unrolled for it
        self._scan_fn = self._pick_fn = None
        # Scan mode with more than _SMALL items: items scanned, queries, and adds, removes
        # and renews (_grid_pays)
        self._scanned = self._queries = self._updates = 0
        self._grid_at = _LARGE if grid_on_demand else _SMALL    # built at insertion past it
        self._coarse = _COARSER if grid_on_demand else 0        # cells 2**this x the extent

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

    def exact_value(self, rect: Rect) -> Any:
        """The value of the latest item whose rect equals `rect`, or None if there is none."""
        i = self._exact.get(rect)
        return None if i is None else self._items[i][1]

    # -- grid helpers -------------------------------------------------------------------
    def _insert(self, item_id: int, rect: Rect) -> None:
        # The first and last cell per dimension that the non-empty `rect` touches.
        first, last, count = self._span(rect.lo, rect.hi, self._cell)
        grid = self._grid
        if last is None:                        # the common case: one cell
            self._home[item_id] = first
            bucket = grid.get(first)
            if bucket is None:
                grid[first] = {item_id}
            else:
                bucket.add(item_id)
            return
        if count > _MAX_CELLS_PER_ITEM:
            self._big.add(item_id)
            return
        # (two cells, the most common case after one: the first and the last)
        cells = [first, last] if count == 2 else self._cells(first, last)
        self._home[item_id] = cells
        for cell in cells:
            bucket = grid.get(cell)
            if bucket is None:
                grid[cell] = {item_id}
            else:
                bucket.add(item_id)

    def _build_grid(self) -> None:
        """Enter grid mode: cells follow the typical extent of the items held."""
        sized = [r for r, _ in self._items.values() if not r.empty]
        if not sized:
            self._cell = None
            return
        self._ones = _packed_bits(sized[0].ndim)
        self._span = _spanner(sized[0].ndim)
        self._cells = _celler(sized[0].ndim)
        bits = 0
        for r in sized:
            cb = r.cell_bits
            bits += _cell_bits(r, self._ones) if cb is None else cb
        self._bits = bits
        self._sized = len(sized)
        self._rebuild()

    def _rebuild(self) -> None:
        n, bits = self._sized, _unpacked(self._bits, self._ndim)
        coarse = self._coarse
        self._cell = tuple(1 << ((2 * b + n) // (2 * n) + coarse) for b in bits)
        self._grid = {}
        self._big = set()
        self._home = {}
        for i, (r, _) in self._items.items():
            if not r.empty:          # empty items live only in _items (see add/remove)
                self._insert(i, r)

    def _grid_pays(self, n: int) -> bool:
        """Count a scan of `n` (> _SMALL) items; whether a grid would have cost less so far
        (then it is built: past _LARGE items it is built at insertion)."""
        self._scanned += n
        self._queries += 1
        return self._scanned > _GRID_QUERY * self._queries + _GRID_UPDATE * self._updates

    def _drifted(self) -> bool:
        """The typical extent is 4x off the cell size (less its _coarse bits) in some dimension."""
        n = self._sized
        limit = _DRIFT_BITS * n
        # A cell of 2**k has bit_length k+1; the items' mean k is sum/n.
        skip = 1 + self._coarse
        for c, b in zip(self._cell, _unpacked(self._bits, self._ndim)):
            if abs((c.bit_length() - skip) * n - b) > limit:
                return True
        return False

    # -- public API ---------------------------------------------------------------------
    def add(self, rect: Rect, value: Any) -> int:
        """Insert an item; returns its id. Empty rects are stored but never overlap anything."""
        if len(rect.lo) != self._ndim:
            if self._first is None:
                self._first = rect
                self._ndim = len(rect.lo)
                self._scan_fn, self._pick_fn, _ = _scanner(self._ndim)
            else:
                self._first._check_same_ndim(rect)  # raises the error naming both rects
        item_id = self._next_id
        self._next_id = item_id + 1
        items = self._items
        items[item_id] = (rect, value)
        exact = self._exact
        if exact is not None:
            exact[rect] = item_id
        if self._cell is None:
            if len(items) > _SMALL:
                self._updates += 1
                if len(items) > self._grid_at:
                    self._build_grid()
            return item_id
        if rect.empty:
            return item_id
        cb = rect.cell_bits
        self._bits += cb if cb is not None else _cell_bits(rect, self._ones)
        self._sized += 1
        if not self._sized & _DRIFT_CHECK_EVERY and self._drifted():
            self._rebuild()
            return item_id
        self._insert(item_id, rect)
        return item_id

    def remove(self, item_id: int) -> None:
        rect, _ = self._items.pop(item_id)
        exact = self._exact
        if exact is not None and exact.get(rect) == item_id:
            del exact[rect]
        if self._cell is None:
            if len(self._items) >= _SMALL:
                self._updates += 1
            return
        if rect.empty:
            return
        self._bits -= rect.cell_bits
        self._sized -= 1
        if len(self._items) <= _SMALL // 2:      # back to scanning
            self._cell, self._grid, self._big, self._home = None, {}, set(), {}
            self._scanned = self._queries = self._updates = 0
            return
        home = self._home.pop(item_id, None)
        if home is None:
            self._big.discard(item_id)
            return
        grid = self._grid
        if type(home) is tuple:                  # one cell
            bucket = grid[home]
            if len(bucket) == 1:
                del grid[home]
            else:
                bucket.discard(item_id)
            return
        for cell in home:
            bucket = grid[cell]
            if len(bucket) == 1:
                del grid[cell]
            else:
                bucket.discard(item_id)

    def renew(self, item_id: int, value: Any = _KEEP) -> int:
        """remove(item_id), then add of its rect with `value` (by default its own): the item
        moves to the end of the insertion order under a new id, which is returned; its cells
        are kept (what remove + add would work out again)."""
        items = self._items
        rect, old = items.pop(item_id)
        new_id = self._next_id
        self._next_id = new_id + 1
        items[new_id] = (rect, old if value is _KEEP else value)
        exact = self._exact
        if exact is not None:
            exact[rect] = new_id
        if self._cell is None:
            if len(items) > _SMALL:
                self._updates += 1
            return new_id
        if rect.empty:
            return new_id
        home = self._home.pop(item_id, None)
        if home is None:
            big = self._big
            big.discard(item_id)
            big.add(new_id)
            return new_id
        self._home[new_id] = home
        grid = self._grid
        for cell in (home,) if type(home) is tuple else home:
            bucket = grid[cell]
            bucket.discard(item_id)
            bucket.add(new_id)
        return new_id

    def replace(self, item_id: int, rect: Rect, value: Any) -> int:
        """remove(item_id), then add(rect, value), in one step; returns the new id."""
        items = self._items
        old = items[item_id][0]
        if self._cell is None or old.empty or rect.empty or len(rect.lo) != len(old.lo) \
                or len(items) <= _SMALL // 2 + 1:
            self.remove(item_id)
            return self.add(rect, value)
        del items[item_id]
        exact = self._exact
        if exact is not None:
            if exact.get(old) == item_id:
                del exact[old]
            exact[rect] = self._next_id
        new_id = self._next_id
        self._next_id = new_id + 1
        items[new_id] = (rect, value)
        home = self._home.pop(item_id, None)
        grid = self._grid
        if home is None:
            self._big.discard(item_id)
        else:
            for cell in (home,) if type(home) is tuple else home:
                bucket = grid[cell]
                if len(bucket) == 1:
                    del grid[cell]
                else:
                    bucket.discard(item_id)
        cb = rect.cell_bits
        self._bits += (cb if cb is not None else _cell_bits(rect, self._ones)) - old.cell_bits
        self._insert(new_id, rect)
        return new_id

    def overlapping(self, rect: Rect) -> list[tuple[int, Rect, Any]]:
        """Items whose rect shares at least one point with `rect`, in insertion order."""
        items = self._items
        if not items or rect.empty:
            return []
        if len(rect.lo) != self._ndim:
            self._first._check_same_ndim(rect)  # raises the error naming both rects
        if self.disjoint:
            i = self._exact.get(rect)
            if i is not None:
                return [(i, rect, items[i][1])]
        cell = self._cell
        if cell is None:
            n = len(items)
            if n <= _SMALL or not self._grid_pays(n):
                return self._scan_fn(items.items(), rect)
            self._build_grid()
            cell = self._cell
            if cell is None:                    # (all items empty)
                return []
        first, last, count = self._span(rect.lo, rect.hi, cell)
        grid = self._grid
        if last is None:                        # the common case: one cell
            bucket = grid.get(first)
            if self._big:
                found = sorted(self._big.union(bucket) if bucket else self._big)
            elif bucket:
                found = bucket if len(bucket) == 1 else sorted(bucket)
            else:
                return []
        elif count >= len(items):
            return self._scan_fn(items.items(), rect)
        else:
            found = set(self._big)
            for c in (first, last) if count == 2 else self._cells(first, last):
                bucket = grid.get(c)
                if bucket:
                    found.update(bucket)
            found = sorted(found)
        # Grid items are non-empty and of `rect`'s dimensionality (_scan without its checks).
        return self._pick_fn(found, items, rect)


_set_cell_bits = Rect.cell_bits.__set__


def _cell_bits(rect: Rect, packer) -> int:
    """Per dimension: (extent - 1).bit_length(), the k of the smallest cell 2**k that holds
    the extent (a part of 35 fits a cell of 64: at most 2 cells, not 3 of 32), packed into
    one int (_packed_bits: an index sums them with one addition); kept on the rect (a piece
    is entered in several indexes)."""
    bits = packer(rect.lo, rect.hi)
    _set_cell_bits(rect, bits)
    return bits


# Packed per-dimension sums: dimension d in bits [_FIELD * d, _FIELD * (d + 1)). Each field
# is a sum of bit lengths (<= 64 each) over the items held, so it stays far below 2**_FIELD
# and never borrows from or carries into its neighbour (items are removed only once added).
_FIELD = 40
_MASK = (1 << _FIELD) - 1
_PACKERS: dict[int, Any] = {}


def _packed_bits(ndim: int):
    """packed(lo, hi) -> the cell bits of a non-empty rect [lo, hi), packed, unrolled for
    `ndim` dimensions."""
    got = _PACKERS.get(ndim)
    if got is None:
        terms = " | ".join(f"((hi[{d}] - lo[{d}] - 1).bit_length() << {_FIELD * d})"
                           for d in range(ndim)) or "0"
        namespace: dict = {}
        exec(compile(f"def packed(lo, hi):\n    return {terms}\n",
                     f"<rectindex cell bits, {ndim}-d>", "exec"), namespace)
        got = _PACKERS[ndim] = namespace["packed"]
    return got


def _unpacked(bits: int, ndim: int) -> list[int]:
    """The per-dimension sums packed in `bits`."""
    return [(bits >> (_FIELD * d)) & _MASK for d in range(ndim)]


# The overlap test of a query's loops (a scan of the items, a pick of the grid's), unrolled
# per dimensionality: `all(map(lt, ...))` twice costs ~0.8 us per item, the unrolled
# comparisons ~0.15 us (a 40-item scan of 3-d rects: 25 -> 5.5 us), and these loops are
# most of a RectIndex query. An index keeps its own pair (set by its first item).
_SCANNERS: dict[int, tuple] = {}


def _scanner(ndim: int) -> tuple:
    got = _SCANNERS.get(ndim)
    if got is None:
        got = _SCANNERS[ndim] = _make_scanners(ndim)
    return got


_SPANNERS: dict[int, Any] = {}


def _spanner(ndim: int):
    """span(lo, hi, cell) -> (first, last, count): the first and last grid cell a non-empty
    rect [lo, hi) touches and how many cells that is; last is None when it is one cell (the
    common case: one tuple made, none compared). Unrolled for `ndim` dimensions (as the
    scanners are: map() over tuples costs ~3x)."""
    got = _SPANNERS.get(ndim)
    if got is None:
        ds = range(ndim)
        bounds = "".join(f"    a{d} = lo[{d}] // cell[{d}]; b{d} = (hi[{d}] - 1) // cell[{d}]\n"
                         for d in ds)
        one = " and ".join(f"a{d} == b{d}" for d in ds) or "True"
        first = "".join(f"a{d}, " for d in ds)
        last = "".join(f"b{d}, " for d in ds)
        count = " * ".join(f"(b{d} - a{d} + 1)" for d in ds) or "1"
        namespace: dict = {}
        exec(compile(f"def span(lo, hi, cell):\n{bounds}    if {one}:\n"
                     f"        return ({first}), None, 1\n"
                     f"    return ({first}), ({last}), {count}\n",
                     f"<rectindex spanner, {ndim}-d>", "exec"), namespace)
        got = _SPANNERS[ndim] = namespace["span"]
    return got


_CELLERS: dict[int, Any] = {}


def _celler(ndim: int):
    """cells(first, last) -> the list of grid cells from `first` to `last` (a span's corners,
    inclusive), in product order; unrolled for `ndim` dimensions (product of the ranges without
    a list of them built per call)."""
    got = _CELLERS.get(ndim)
    if got is None:
        ds = range(ndim)
        ranges = ", ".join(f"range(first[{d}], last[{d}] + 1)" for d in ds)
        namespace: dict = {"product": product}
        exec(compile(f"def cells(first, last):\n    return list(product({ranges}))\n",
                     f"<rectindex cells, {ndim}-d>", "exec"), namespace)
        got = _CELLERS[ndim] = namespace["cells"]
    return got


def _make_scanners(ndim: int) -> tuple:
    if ndim == 0:                       # a 0-d rect is one point: non-empty ones overlap
        test = "True"
        bounds = ""
    else:
        test = " and ".join(f"a[{d}] < h{d} and l{d} < b[{d}]" for d in range(ndim))
        names = ", ".join(f"l{d}" for d in range(ndim))
        hnames = ", ".join(f"h{d}" for d in range(ndim))
        bounds = f"    {names}, = rect.lo\n    {hnames}, = rect.hi\n"
    src = (
        "def scan(entries, rect):\n" + bounds +
        "    out = []\n"
        "    for i, (r, v) in entries:\n"
        "        a = r.lo; b = r.hi\n"
        f"        if {test} and not r.empty:\n"
        "            out.append((i, r, v))\n"
        "    return out\n"
        "def pick(found, items, rect):\n" + bounds +
        "    out = []\n"
        "    for i in found:\n"
        "        r, v = items[i]\n"
        "        a = r.lo; b = r.hi\n"
        f"        if {test}:\n"
        "            out.append((i, r, v))\n"
        "    return out\n"
        "def meets(rects, rect):\n" + bounds +
        "    for r in rects:\n"
        "        a = r.lo; b = r.hi\n"
        f"        if {test}:\n"
        "            return True\n"
        "    return False\n")
    namespace: dict = {}
    exec(compile(src, f"<rectindex scanners, {ndim}-d>", "exec"), namespace)
    return namespace["scan"], namespace["pick"], namespace["meets"]


def overlaps_any(rects, rect: Rect) -> bool:
    """Whether any of the non-empty `rects` overlaps the non-empty `rect` (all of one
    dimensionality): any(map(rect.overlaps, rects)) with the test unrolled (BufferAccesses'
    check of a new rect against the rects seen: ~0.4 us a rect as method calls)."""
    return _scanner(len(rect.lo))[2](rects, rect)


def scan_items(entries, rect: Rect) -> list[tuple[int, Rect, Any]]:
    """The (id, rect, value) of `entries` [(id, (rect, value))], in their order, whose rect
    overlaps the non-empty `rect` (of their dimensionality): a RectIndex query's scan, for a
    caller keeping a few items in a dict of its own (coherence.PendingSums)."""
    return _scanner(len(rect.lo))[0](entries, rect)
