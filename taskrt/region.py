"""Region (a named logical tensor) and the rects of its block parts.

Block parts split each dimension like torch.tensor_split: with extent L and degree n, the
first L % n parts get one element more than the others. The launches' projections give each
point's rects (parallel_ops derives them from an operator's config), so there is no separate
Partition object (docs/design.md, "No Partition or Mapper objects").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

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
