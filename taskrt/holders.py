"""Holders: the devices holding one valid piece of a region (coherence.RegionState.valid),
in the order they got its current value, its writer first. coherence.py's source choice
reads that order (ties go to the earliest holder; a read's fragments are grouped by their
first holder)."""
from __future__ import annotations

from typing import Iterable


class Holders:
    """The devices holding a valid piece's current value, in the order they got it (its
    writer first), with a set for membership once there are more than _LONG of them. Each
    valid item owns its Holders (a piece split off gets a copy), so a new holder is appended
    in place. As tuples, data parallelism on n devices made every replica's write of a
    weight copy an n-tuple (`holders + (device,)`) and every point's read scan one
    (`device in holders`): ~4n holder entries touched per graph node (call counts in
    docs/design.md, "Holder lists are owned and appended")."""
    __slots__ = ("order", "_members")

    def __init__(self, devices: Iterable[int]):
        self.order = list(devices)
        self._members = set(self.order) if len(self.order) > _LONG else None

    def __contains__(self, device: int) -> bool:
        members = self._members
        return device in (self.order if members is None else members)

    def __len__(self) -> int:
        return len(self.order)

    def __iter__(self):
        return iter(self.order)

    def __getitem__(self, i: int) -> int:
        return self.order[i]

    def __repr__(self) -> str:
        return f"Holders({self.order})"

    def append(self, device: int) -> None:
        order, members = self.order, self._members
        order.append(device)
        if members is not None:
            members.add(device)
        elif len(order) > _LONG:
            self._members = set(order)

    def copy(self) -> "Holders":
        return Holders(self.order)


_LONG = 8       # holder lists longer than this get a set for membership
