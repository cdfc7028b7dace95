"""Privileges and region requirements: what a point task does to which rect of which region."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from .errors import PrivilegeError
from .geometry import Rect
from .region import Region


class Privilege(Enum):
    READ = "R"             # read only
    WRITE_DISCARD = "WD"   # overwrite every element; previous contents are not needed
    READ_WRITE = "RW"      # read then update in place
    REDUCE_SUM = "Red+"    # contribute a partial value; contributions are summed before a read

    @property
    def reads(self) -> bool:
        return self in (Privilege.READ, Privilege.READ_WRITE)

    @property
    def writes(self) -> bool:
        return self in (Privilege.WRITE_DISCARD, Privilege.READ_WRITE)


R, WD, RW, RED = Privilege.READ, Privilege.WRITE_DISCARD, Privilege.READ_WRITE, Privilege.REDUCE_SUM


@dataclass(frozen=True, slots=True)
class RegionRequirement:
    region: Region
    rect: Rect
    privilege: Privilege

    def __post_init__(self):
        if self.rect.ndim != len(self.region.shape) or not self.region.rect.contains(self.rect):
            raise PrivilegeError(f"Requirement on '{self.region.name}': rect {self.rect} is not "
                                 f"inside the region {self.region.rect}. Clip it to the region.")

    @property
    def nbytes(self) -> int:
        return self.region.nbytes(self.rect)

    def __str__(self) -> str:
        return f"{self.privilege.value}({self.region.name}{self.rect})"

    __repr__ = __str__
