"""Privileges and region requirements: what a point task does to which rect of which region."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from operator import le

from .errors import PrivilegeError
from .geometry import Rect
from .region import Region


class Privilege(Enum):
    READ = "R"             # read only
    WRITE_DISCARD = "WD"   # overwrite every element; previous contents are not needed
    READ_WRITE = "RW"      # read then update in place
    REDUCE_SUM = "Red+"    # contribute a partial value; contributions are summed before a read

    # Each member also has `reads` and `writes` (bools, set below).


R, WD, RW, RED = Privilege.READ, Privilege.WRITE_DISCARD, Privilege.READ_WRITE, Privilege.REDUCE_SUM

# Each member's value also as a plain attribute: on Python 3.11 `member.value` is a property
# costing about five attribute reads, and every task's cost key reads it per requirement
# (TaskNode.cost_key). Whether it reads or writes are plain attributes too (the planner asks
# per requirement; as properties, two enum comparisons each).
for _p in Privilege:
    _p.code = _p.value
    _p.reads = _p in (R, RW)
    _p.writes = _p in (WD, RW)
del _p


@dataclass(frozen=True, slots=True)
class RegionRequirement:
    region: Region
    rect: Rect
    privilege: Privilege

    def __post_init__(self):
        rect, shape = self.rect, self.region.shape
        # Inside the region's rect [0, shape) (Region.rect.contains, without making the rect:
        # lowering makes a requirement per point task and region).
        if len(rect.lo) != len(shape) or not (rect.empty or (
                min(rect.lo, default=0) >= 0 and all(map(le, rect.hi, shape)))):
            raise PrivilegeError(f"Requirement on '{self.region.name}': rect {self.rect} is not "
                                 f"inside the region {self.region.rect}. Clip it to the region.")

    @property
    def nbytes(self) -> int:
        return self.region.nbytes(self.rect)

    def __str__(self) -> str:
        return f"{self.privilege.value}({self.region.name}{self.rect})"

    __repr__ = __str__
