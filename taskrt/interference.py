"""Interference within one launch: which requirements of its points may touch the same rect.

Points of one launch run in any order (or at once), so two of them may share a rect only when
both read or both reduce (also within one point: a tensor used twice gets two gradient
contributions), or, in a launch of replicas, when they write the same rect on different
devices. The planner checks each launch it adds or replaces before planning it.
"""
from __future__ import annotations

from collections import defaultdict

from .coherence import _R, _RED
from .errors import PrivilegeError
from .geometry import bounding_box
from .launch import IndexLaunch
from .rectindex import RectIndex


def check_interference(launch: IndexLaunch, points) -> None:
    """Requirements of one launch may share a rect only when both read or both reduce
    (also within one point: a tensor used twice gets two gradient contributions), or, in a
    launch of replicas, when they write the same rect on different devices. Regions
    where no pair can conflict (see _cannot_interfere) are not checked pair by pair."""
    by_region: dict[str, list] = {}
    for color, device, reqs in points:
        for req in reqs:
            by_region.setdefault(req.region.name, []).append((color, device, req))
    check = {name for name, accs in by_region.items()
             if not _cannot_interfere(accs, launch.replicas)}
    if not check:
        return
    seen: dict[str, RectIndex] = defaultdict(RectIndex)
    for color, device, reqs in points:
        for req in reqs:
            if req.region.name not in check:
                continue
            for _, r, (c2, d2, p2) in seen[req.region.name].overlapping(req.rect):
                p1 = req.privilege
                if (p1 is _R and p2 is _R) or (p1 is _RED and p2 is _RED):
                    continue
                if launch.replicas and c2 != color and d2 != device and r == req.rect \
                        and p1 is p2:
                    continue
                where = "requirements" if c2 == color else "points"
                raise PrivilegeError(
                    f"Launch '{launch.name}': {where} {c2} ({p2.value}) and {color} "
                    f"({p1.value}) both touch '{req.region.name}' at "
                    f"{r.intersect(req.rect)}. Points of one launch may overlap only "
                    "when both read or both reduce; split the launch or the rects.")
            seen[req.region.name].add(req.rect, (color, device, req.privilege))


def _cannot_interfere(accesses, replicas: bool) -> bool:
    """True when no two of one region's (color, device, requirement) in a launch can conflict:
    one access; all read or all reduce; all rects disjoint (shown along one dimension); in
    a launch of replicas, per distinct rect one privilege and each access of its own point
    and device, the distinct rects disjoint; or the writes apart from everything else
    (_writes_apart: an LSTM step reads step t-1 of a region on every point and writes its
    part of step t)."""
    if len(accesses) < 2:
        return True
    privs = {req.privilege for _, _, req in accesses}
    if len(privs) == 1 and (_R in privs or _RED in privs):
        return True
    first = accesses[0][2].rect
    if replicas:
        # Replicas of one or several parts (data parallel's weights: one rect written alike
        # by every point; Megatron's: a weight's t shards, each written by its data-parallel
        # replicas): per distinct rect, one privilege and each access of its own point and
        # device, and the distinct rects disjoint.
        by_rect: dict = {}
        for c, d, req in accesses:
            by_rect.setdefault(req.rect, []).append((c, d, req.privilege))
        if len(by_rect) < len(accesses) and all(
                len({p for _, _, p in g}) == 1 and len({c for c, _, _ in g}) == len(g) ==
                len({d for _, d, _ in g}) for g in by_rect.values()):
            return _disjoint([r for r in by_rect if not r.empty], first.ndim)
    return _disjoint([req.rect for _, _, req in accesses if not req.rect.empty],
                     first.ndim) or _writes_apart(accesses, first.ndim)


def _writes_apart(accesses, ndim: int) -> bool:
    """Whether the writes (any privilege but R and Red+) are pairwise disjoint (shown along
    one dimension) and each of them, the reads' bounding box and the sums' bounding box meet
    none of the others: then any two accesses that meet both read or both reduce."""
    reads, sums, writes = [], [], []
    for _, _, req in accesses:
        r = req.rect
        if not r.empty:
            p = req.privilege
            (reads if p is _R else sums if p is _RED else writes).append(r)
    if not _disjoint(writes, ndim):
        return False
    boxes = [box for box in (bounding_box(reads), bounding_box(sums)) if box is not None]
    if len(boxes) == 2 and boxes[0].overlaps(boxes[1]):
        return False
    return not any(box.overlaps(w) for box in boxes for w in writes)


def _disjoint(rects: list, ndim: int) -> bool:
    """Whether `rects` (none empty) are pairwise disjoint, shown along one dimension, or as
    distinct cells of a grid (in every dimension their extents pairwise equal or disjoint:
    two distinct cells differ in some dimension's extent, so they are apart there)."""
    if len(rects) < 2:
        return True
    grid = True
    for d in range(ndim):
        spans = sorted({(r.lo[d], r.hi[d]) for r in rects})
        end = spans[0][1]
        for lo, hi in spans[1:]:
            if lo < end:
                grid = False
                break
            end = hi
        else:
            if len(spans) == len(rects):
                return True             # (distinct extents here, pairwise disjoint)
    return grid and len(set(rects)) == len(rects)
