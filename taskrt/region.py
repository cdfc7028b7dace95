"""Region (a named logical tensor) and Partition (a region split into parts by color).

Block partitions split each dimension like torch.tensor_split: with extent L and degree n,
the first L % n parts get one element more than the others. Degrees larger than the extent
(which would leave empty parts) are refused. Explicit partitions take any rects inside the
region, overlapping or not (halo reads are expressed that way).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import product
from typing import Iterator, Mapping, Sequence

from .errors import PartitionError
from .geometry import Rect

_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "uint8": 1,
             "int16": 2, "int32": 4, "int64": 8, "bool": 1}


@dataclass(frozen=True, slots=True)
class Region:
    """A named logical tensor: the planner tracks where valid copies of its parts live."""
    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"

    def __post_init__(self):
        if self.dtype not in _ITEMSIZE:
            raise PartitionError(f"Region '{self.name}': unknown dtype '{self.dtype}'. "
                                 f"Use one of {sorted(_ITEMSIZE)}.")
        if any((not isinstance(s, int)) or s < 0 for s in self.shape):
            raise PartitionError(f"Region '{self.name}': shape {self.shape} must be "
                                 "non-negative integers.")

    @property
    def rect(self) -> Rect:
        return Rect.from_shape(self.shape)

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self.dtype]

    def nbytes(self, rect: Rect | None = None) -> int:
        return (self.rect if rect is None else rect).volume * _ITEMSIZE[self.dtype]

    def __str__(self) -> str:
        return self.name


def block_bounds(extent: int, degree: int, index: int) -> tuple[int, int]:
    """[lo, hi) of part `index` when `extent` is split into `degree` balanced blocks."""
    q, r = divmod(extent, degree)
    lo = index * q + min(index, r)
    return lo, lo + q + (1 if index < r else 0)


def block_rect(shape: Sequence[int], degrees: Sequence[int], color: Sequence[int]) -> Rect:
    """The rect of part `color` of a block partition of a tensor of this shape."""
    bounds = [block_bounds(s, d, c) for s, d, c in zip(shape, degrees, color)]
    return Rect(tuple(b[0] for b in bounds), tuple(b[1] for b in bounds))


@dataclass(frozen=True)
class Partition:
    """A region split into parts indexed by color points (tuples of ints)."""
    region: Region
    parts: tuple[tuple[tuple[int, ...], Rect], ...]
    _by_color: dict = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self):
        object.__setattr__(self, "_by_color", dict(self.parts))

    @staticmethod
    def blocks(region: Region, degrees: Sequence[int]) -> "Partition":
        """Split every dimension into `degrees[d]` balanced blocks; colors are grid points."""
        degrees = tuple(int(d) for d in degrees)
        if len(degrees) != len(region.shape):
            raise PartitionError(f"Partition of '{region.name}': {len(degrees)} degrees "
                                 f"{degrees} for a {len(region.shape)}-d region "
                                 f"{region.shape}. Give one degree per dimension.")
        for d, (deg, ext) in enumerate(zip(degrees, region.shape)):
            if deg < 1 or deg > max(ext, 1):
                raise PartitionError(
                    f"Partition of '{region.name}': degree {deg} on dimension {d} of extent "
                    f"{ext} would leave empty parts. Use a degree between 1 and {max(ext, 1)}.")
        parts = tuple((c, block_rect(region.shape, degrees, c))
                      for c in product(*(range(d) for d in degrees)))
        return Partition(region, parts)

    @staticmethod
    def explicit(region: Region, parts: Mapping[tuple[int, ...], Rect]) -> "Partition":
        """Any rects inside the region, keyed by color."""
        full = region.rect
        for color, rect in parts.items():
            if rect.ndim != full.ndim or not full.contains(rect):
                raise PartitionError(f"Partition of '{region.name}': part {color} = {rect} "
                                     f"is not inside the region {full}. Clip it to the region.")
        return Partition(region, tuple((tuple(c), r) for c, r in parts.items()))

    def __getitem__(self, color: tuple[int, ...]) -> Rect:
        try:
            return self._by_color[tuple(color)]
        except KeyError:
            raise PartitionError(f"Partition of '{self.region.name}': no part with color "
                                 f"{tuple(color)}; colors are {list(self._by_color)[:8]}...") from None

    def __len__(self) -> int:
        return len(self.parts)

    def __iter__(self) -> Iterator[tuple[tuple[int, ...], Rect]]:
        return iter(self.parts)

    @property
    def disjoint(self) -> bool:
        rects = [r for _, r in self.parts]
        return all(not a.overlaps(b) for i, a in enumerate(rects) for b in rects[i + 1:])

    @property
    def complete(self) -> bool:
        return sum(r.volume for _, r in self.parts) >= self.region.rect.volume and \
            self.disjoint and all(self.region.rect.contains(r) for _, r in self.parts)
