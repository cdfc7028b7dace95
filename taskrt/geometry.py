"""Rect: n-dimensional half-open integer boxes, the unit of every partition and copy.

A Rect is `lo <= p < hi` per dimension. Empty rects (some hi <= lo) are legal values;
all operations treat them consistently (volume 0, intersect with nothing).
"""
from __future__ import annotations

from operator import attrgetter, itemgetter, le
from typing import Iterable, Sequence

from .errors import RectError


class _RectFields:
    """A Rect's fields (slots), shared by Rect and _FreshRect (the same layout, so an object
    made as one can become the other)."""
    __slots__ = ("lo", "hi", "empty", "volume", "_hash", "_shape", "cell_bits")


class Rect(_RectFields):
    """An immutable n-d half-open box. (A plain slotted class rather than a dataclass: the
    planner creates and compares millions of them, and volume, emptiness and the hash are
    cached.)"""
    __slots__ = ()

    def __new__(cls, lo: tuple[int, ...], hi: tuple[int, ...]):
        # (__new__, not __init__: made as _made makes its rects, without a call per field)
        if len(lo) != len(hi):
            raise RectError(f"Rect: lo {lo} and hi {hi} have different lengths. "
                            "Give one bound per dimension.")
        volume = 1
        for l, h in zip(lo, hi):
            if h <= l:
                volume = 0
                break
            volume *= h - l
        return _made(lo, hi, volume)

    def __setattr__(self, name, value):
        raise AttributeError(f"Rect is immutable (tried to set {name})")

    def __eq__(self, other) -> bool:
        return isinstance(other, Rect) and self.lo == other.lo and self.hi == other.hi

    def __hash__(self) -> int:
        h = self._hash
        if h is None:
            h = hash((self.lo, self.hi))
            _set_hash(self, h)
        return h

    def __reduce__(self):
        return (Rect, (self.lo, self.hi))

    @staticmethod
    def from_shape(shape: Sequence[int]) -> "Rect":
        """The rect covering a whole tensor of this shape: Rect.from_shape((2, 3)) == [0:2,0:3].
        (Rects are immutable, so one per shape is shared.)"""
        try:
            return _WHOLE[shape]
        except (KeyError, TypeError):
            pass
        rect = Rect((0,) * len(shape), tuple(int(s) for s in shape))
        if isinstance(shape, tuple) and len(_WHOLE) < 100_000:
            _WHOLE[shape] = rect
        return rect

    @staticmethod
    def of(*bounds: tuple[int, int]) -> "Rect":
        """Rect.of((0, 4), (2, 6)) is [0:4,2:6]."""
        return Rect(tuple(b[0] for b in bounds), tuple(b[1] for b in bounds))

    @property
    def ndim(self) -> int:
        return len(self.lo)

    @property
    def shape(self) -> tuple[int, ...]:
        shape = self._shape
        if shape is None:
            shape = tuple(max(0, h - l) for l, h in zip(self.lo, self.hi))
            _set_shape(self, shape)
        return shape

    def _check_same_ndim(self, other: "Rect") -> None:
        if len(self.lo) != len(other.lo):
            raise RectError(f"Rect {self} and {other}: different dimensionality "
                            f"({self.ndim} vs {other.ndim}). Compare rects of one region.")

    def intersect(self, other: "Rect") -> "Rect":
        """The common part; possibly empty. When it equals self or other, that rect itself
        (no new object: the planner intersects millions of rects, most of them nested)."""
        n = len(self.lo)
        if n != len(other.lo):
            self._check_same_ndim(other)
        if n < _UNROLLED:
            return _INTERSECT[n](self, other)
        slo, shi, olo, ohi = self.lo, self.hi, other.lo, other.hi
        lo = tuple(map(max, slo, olo))
        hi = tuple(map(min, shi, ohi))
        if lo == slo and hi == shi:
            return self
        if lo == olo and hi == ohi:
            return other
        return Rect(lo, hi)

    def overlaps(self, other: "Rect") -> bool:
        """True when the two rects share at least one point (touching is not overlapping)."""
        if len(self.lo) != len(other.lo):
            self._check_same_ndim(other)
        if self.empty or other.empty:
            return False
        for a, b, c, d in zip(self.lo, self.hi, other.lo, other.hi):
            if a >= d or c >= b:
                return False
        return True

    def contains(self, other: "Rect") -> bool:
        """True when every point of `other` is in self; an empty rect is contained in any rect."""
        if len(self.lo) != len(other.lo):
            self._check_same_ndim(other)
        return other.empty or (all(map(le, self.lo, other.lo)) and
                               all(map(le, other.hi, self.hi)))

    def contains_point(self, point: Sequence[int]) -> bool:
        return all(l <= p < h for l, p, h in zip(self.lo, point, self.hi))

    def slices_within(self, container: "Rect") -> tuple[slice, ...]:
        """Slices selecting self inside a tensor that holds `container` (self must lie in it)."""
        if not container.contains(self):
            raise RectError(f"Rect {self} is not inside {container}: cannot slice it from a "
                            "buffer of that rect. Allocate the buffer to cover both.")
        return tuple(slice(l - c, h - c) for l, h, c in zip(self.lo, self.hi, container.lo))

    def translate(self, offset: Sequence[int]) -> "Rect":
        return Rect(tuple(l + o for l, o in zip(self.lo, offset)),
                    tuple(h + o for h, o in zip(self.hi, offset)))

    def union_bbox(self, other: "Rect") -> "Rect":
        """The smallest rect containing both (empty rects are ignored)."""
        if self.empty:
            return other
        if other.empty:
            return self
        n = len(self.lo)
        if n != len(other.lo):
            self._check_same_ndim(other)
        if n < _UNROLLED:
            return _UNION[n](self, other)
        return Rect(tuple(map(min, self.lo, other.lo)), tuple(map(max, self.hi, other.hi)))

    def subtract(self, other: "Rect") -> list["Rect"]:
        """Disjoint rects covering self minus other (at most 2*ndim of them): per dimension
        in order, the part below the intersection and the part above it, each limited to
        the intersection in the dimensions before."""
        slo, shi = self.lo, self.hi
        n = len(slo)
        if n != len(other.lo):
            self._check_same_ndim(other)
        if n < _UNROLLED:
            return _SUBTRACT[n](self, other)
        ilo = tuple(map(max, slo, other.lo))
        ihi = tuple(map(min, shi, other.hi))
        for l, h in zip(ilo, ihi):
            if h <= l:                      # no intersection
                return [] if self.empty else [self]
        if ilo == slo and ihi == shi:
            return []
        pieces = []
        lo, hi = list(slo), list(shi)
        for d in range(len(slo)):
            a, b = ilo[d], ihi[d]
            if lo[d] < a:
                hi[d] = a
                pieces.append(Rect(tuple(lo), tuple(hi)))
            if b < shi[d]:
                lo[d], hi[d] = b, shi[d]
                pieces.append(Rect(tuple(lo), tuple(hi)))
            lo[d], hi[d] = a, b
        return pieces

    def __str__(self) -> str:
        return "[" + ",".join(f"{l}:{h}" for l, h in zip(self.lo, self.hi)) + "]"

    __repr__ = __str__


_set_lo, _set_hi, _set_empty, _set_volume, _set_hash, _set_shape, _set_cell_bits = (
    Rect.lo.__set__, Rect.hi.__set__, Rect.empty.__set__, Rect.volume.__set__,
    Rect._hash.__set__, Rect._shape.__set__, Rect.cell_bits.__set__)
_WHOLE: dict = {}           # shape -> Rect.from_shape(shape)
SHAPE_IF_ASKED = attrgetter("_shape")
"""A Rect's shape where its `shape` was asked before (kept), else None: a C-level read for
passes over many rects (taskrt/taskclasses.py)."""


# intersect and subtract unrolled per dimensionality (below _UNROLLED dimensions), generated
# once: the generic loops call max/min through map per dimension and build lists, ~3-5x the
# unrolled comparisons, and the planner intersects and subtracts millions of rects. The
# generic bodies above are what they compute, and tests/taskrt/test_rect.py compares them.
_UNROLLED = 9


def _unrolled(ndim: int) -> tuple:
    ds = range(ndim)
    s = [f"s{d}" for d in ds]           # self.lo, self.hi
    t = [f"t{d}" for d in ds]
    o = [f"o{d}" for d in ds]           # other.lo, other.hi
    p = [f"p{d}" for d in ds]
    i = [f"i{d}" for d in ds]           # the intersection's lo, hi
    j = [f"j{d}" for d in ds]

    def tup(names):
        return "(" + "".join(f"{x}, " for x in names) + ")"

    def volume(lo, hi):                 # of a non-empty rect
        return " * ".join(f"({h} - {l})" for l, h in zip(lo, hi)) or "1"

    unpack = (f"    slo = self.lo; shi = self.hi; olo = other.lo; ohi = other.hi\n"
              f"    {tup(s)} = slo\n    {tup(t)} = shi\n    {tup(o)} = olo\n"
              f"    {tup(p)} = ohi\n" +
              "".join(f"    i{d} = s{d} if s{d} > o{d} else o{d}\n"
                      f"    j{d} = t{d} if t{d} < p{d} else p{d}\n" for d in ds))
    empty = " or ".join(f"j{d} <= i{d}" for d in ds) or "False"
    inter = ("def intersect(self, other):\n" + unpack +
             f"    lo = {tup(i)}\n    hi = {tup(j)}\n"
             "    if lo == slo and hi == shi:\n        return self\n"
             "    if lo == olo and hi == ohi:\n        return other\n"
             f"    if {empty}:\n        return make(lo, hi, 0)\n"
             f"    return make(lo, hi, {volume(i, j)})\n")
    whole = " and ".join(f"i{d} == s{d} and j{d} == t{d}" for d in ds) or "True"
    body = ""
    for d in ds:
        lo_below = i[:d] + [s[d]] + s[d + 1:]
        hi_below = j[:d] + [i[d]] + t[d + 1:]
        lo_above = i[:d] + [j[d]] + s[d + 1:]
        hi_above = j[:d] + [t[d]] + t[d + 1:]
        body += (f"    if s{d} < i{d}:\n        out.append(make({tup(lo_below)}, "
                 f"{tup(hi_below)}, {volume(lo_below, hi_below)}))\n"
                 f"    if j{d} < t{d}:\n        out.append(make({tup(lo_above)}, "
                 f"{tup(hi_above)}, {volume(lo_above, hi_above)}))\n")
    sub = ("def subtract(self, other):\n" + unpack +
           f"    if {empty}:\n        return [] if self.empty else [self]\n"
           f"    if {whole}:\n        return []\n"
           "    out = []\n" + body + "    return out\n")
    # The bounding box of two non-empty rects (union_bbox after its checks).
    k = [f"k{d}" for d in ds]
    m = [f"m{d}" for d in ds]
    union = ("def union(self, other):\n" + unpack +
             "".join(f"    k{d} = s{d} if s{d} < o{d} else o{d}\n"
                     f"    m{d} = t{d} if t{d} > p{d} else p{d}\n" for d in ds) +
             f"    return make({tup(k)}, {tup(m)}, {volume(k, m)})\n")
    namespace = {"make": _made}
    exec(compile(inter + sub + union, f"<rect ops, {ndim}-d>", "exec"), namespace)
    return namespace["intersect"], namespace["subtract"], namespace["union"]


class _FreshRect(_RectFields):
    """A Rect being made by _made: its fields are set as plain attributes (Rect's own
    __setattr__, which keeps it immutable, makes each set a call: 0.59 us a rect with the
    slot setters, 0.25 us this way), then it becomes a Rect."""
    __slots__ = ()


def _made(lo: tuple, hi: tuple, volume: int) -> Rect:
    """Rect(lo, hi) of a known volume (what __init__ computes), without its checks and loop:
    for the unrolled code's results, whose bounds have the same length."""
    r = _new(_FreshRect)
    r.lo = lo
    r.hi = hi
    r.volume = volume
    r.empty = volume == 0
    r._hash = None
    r._shape = None
    r.cell_bits = None
    r.__class__ = Rect
    return r


_new = object.__new__
_INTERSECT, _SUBTRACT, _UNION = zip(*[_unrolled(n) for n in range(_UNROLLED)])


_INSIDE: dict = {}


def inside_test(ndim: int):
    """inside(box, rect) -> whether every lo of `rect` is >= box's and every hi <= box's (for
    a non-empty rect, box.contains(rect)), unrolled for `ndim` dimensions: the planner asks
    it of every access's instance (all(map(le, ...)) twice costs ~3x)."""
    got = _INSIDE.get(ndim)
    if got is None:
        test = " and ".join([f"a[{d}] <= c[{d}]" for d in range(ndim)] +
                            [f"d[{d}] <= b[{d}]" for d in range(ndim)]) or "True"
        namespace: dict = {}
        exec(compile(f"def inside(box, rect):\n    a = box.lo; b = box.hi; c = rect.lo; "
                     f"d = rect.hi\n    return {test}\n", f"<rect inside, {ndim}-d>", "exec"),
             namespace)
        got = _INSIDE[ndim] = namespace["inside"]
    return got


def rect_mover(axis: int, delta: int):
    """A function moving rects by `delta` along `axis`, one new Rect per distinct rect
    (the planner's slab plans, lowering's LSTM steps moved along time)."""
    moved: dict[Rect, Rect] = {}

    def move(r: Rect) -> Rect:
        got = moved.get(r)
        if got is None:
            lo, hi = list(r.lo), list(r.hi)
            lo[axis] += delta
            hi[axis] += delta
            # (A move keeps every extent: the volume is the rect's, no checks or loop.)
            got = moved[r] = _made(tuple(lo), tuple(hi), r.volume)
        return got
    return move


def bounding_box(rects: Iterable[Rect]) -> Rect | None:
    """Smallest rect containing all non-empty rects, or None when there are none (the one
    rect itself when there is one; else a new rect, made once)."""
    sized = [r for r in rects if not r.empty]
    if len(sized) < 2:
        return sized[0] if sized else None
    first = sized[0]
    for r in sized:
        if len(r.lo) != len(first.lo):
            first._check_same_ndim(r)
    return Rect(tuple(map(min, *[r.lo for r in sized])),
                tuple(map(max, *[r.hi for r in sized])))


def subtract_all(rect: Rect, others: Iterable[Rect]) -> list[Rect]:
    """Disjoint rects covering rect minus the union of others."""
    pieces = [rect] if not rect.empty else []
    for o in others:
        if not pieces:
            break
        nxt = []
        for p in pieces:
            nxt.extend(p.subtract(o))
        pieces = nxt
    return pieces


def merge_adjacent(rects: list[Rect]) -> list[Rect]:
    """Disjoint rects merged into fewer rects covering the same points: all into their
    bounding box when they fill it, else, dimension by dimension until nothing changes,
    runs of rects equal in every other dimension that touch end to end."""
    box = bounding_box(rects)
    if box is None:
        return []
    if sum(r.volume for r in rects) == box.volume:
        return [box]
    out = [r for r in rects if not r.empty]
    # Passes along dimensions 0, 1, ..., ndim-1, 0, ... until ndim in a row merge nothing
    # (what rounds over all dimensions until a round merges nothing leave), stopping early
    # when the ndim-1 passes after one that merged along d merged nothing: a pass along d
    # again would merge nothing either (a merge joins every touching run of a line, and
    # lines along d are unchanged by it), and a pass that merges nothing keeps `out` as is.
    ndim = box.ndim
    quiet, d = 0, 0
    while quiet < ndim and len(out) > 1:
        merged = _merge_along(out, d)
        if len(merged) < len(out):
            out, quiet = merged, 1
        else:
            quiet += 1
        d = d + 1 if d + 1 < ndim else 0
    return out


def _merge_along(rects: list[Rect], d: int) -> list[Rect]:
    """Rects equal outside dimension d and touching in d, merged (first-seen order kept).
    When no two rects share a line (their extents outside d), nothing can merge: `rects`
    itself is returned."""
    lines: dict[tuple, list[Rect]] = {}
    others = _OTHER_DIMS.get((len(rects[0].lo), d)) if rects else None
    if others is None:
        others = _other_dims(len(rects[0].lo), d) if rects else None
    for r in rects:
        key = (others(r.lo), others(r.hi))
        line = lines.get(key)
        if line is None:
            lines[key] = [r]
        else:
            line.append(r)
    if len(lines) == len(rects):
        return rects
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


_OTHER_DIMS: dict[tuple[int, int], object] = {}


def _other_dims(ndim: int, d: int):
    """A function of a corner (lo or hi) giving its coordinates outside dimension d (a line's
    key along d, with the other corner's)."""
    dims = [k for k in range(ndim) if k != d]
    got = itemgetter(*dims) if dims else (lambda corner: ())
    _OTHER_DIMS[ndim, d] = got
    return got
