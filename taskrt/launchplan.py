"""LaunchPlan: the planner's record of one launch (its expanded points and what planning the
regions it touches gave each point task), and how a launch's points group by region.
The planner (planner.py) owns the records; re-planning (replace) and undo swap them."""
from __future__ import annotations

from itertools import repeat
from operator import attrgetter, itemgetter, ne

from .launch import IndexLaunch
from .privilege import RW, R


class LaunchPlan:
    """The planner's record of one launch: its points, and what planning the regions it
    touches gave its point tasks. replace() gives a launch a new record."""
    __slots__ = ("launch", "points", "read_order", "regions", "task_preds",
                 "task_targets", "state_src", "version", "refs", "columns")

    def __init__(self, launch: IndexLaunch, points: list, reads: dict, accesses: dict,
                 state_src: list, columns: bool = False):
        self.launch = launch
        self.points = points                          # per point: (color, device, reqs)
        self.read_order = list(reads)                 # regions it reads, by first read
        self.regions = list(accesses)                 # regions it touches, by first use
        # Per point: region name -> pred refs; and per requirement: Red+ targets (else None).
        # With `columns` (a planner that is never re-planned) neither: per region, in the
        # order the launch first uses them, what planning it gave the launch's accesses
        # (taskcolumns.py), read once when the tasks are built.
        self.task_preds: list[dict] | None = None if columns else [{} for _ in points]
        self.task_targets: list[list] | None = None if columns else \
            [[None] * len(reqs) for _, _, reqs in points]
        self.columns: list | None = [] if columns else None
        self.state_src = state_src                    # per point: task ref or None
        # Changes whenever one of its groups is rebuilt or put back (Planner.versions).
        self.version = -1
        # Per point: its task ref (launch index, point index), made once (task_refs): the
        # region planners keep a ref per access, and other tasks' preds hold them.
        self.refs: list | None = None


def task_refs(lp: LaunchPlan, li: int) -> list:
    """Launch `li`'s task refs (li, point), one tuple per point, kept on its record."""
    lp.refs = [(li, pi) for pi in range(len(lp.points))]
    return lp.refs


def by_region(points, deferred: bool = False) -> tuple[dict, dict]:
    """A launch's expanded points grouped by region, in first-use order: the reads
    (color, device, rect) and every access (point index, requirement index, requirement).
    `deferred`: where the points ask alike, a region's reads are a DeferredReads and its
    accesses a DeferredAccesses, made into the lists by `reads_list` and `accesses_list`
    (a region planned with its class needs only its name and its accesses' key)."""
    grouped = _by_region_alike(points, deferred)
    return grouped if grouped is not None else _by_region_loop(points)


def by_region_and_alike(points, deferred: bool = False,
                        alike: bool = False) -> tuple[tuple[dict, dict], bool]:
    """by_region, and whether its points ask alike: then each region's accesses are
    [(point index, k, requirement)] over all the points in order, with one k and one
    privilege (_by_region_alike). `alike`: the points are known to ask alike (a
    RequirementsTable's columns say so): not checked again."""
    grouped = _by_region_alike(points, deferred, alike)
    if grouped is not None:
        return grouped, True
    return _by_region_loop(points), False


class DeferredReads:
    """One region's reads by a launch whose points ask alike, not made yet: the points
    and the region's requirement per point."""
    __slots__ = ("points", "col")

    def __init__(self, points, col):
        self.points, self.col = points, col


class DeferredAccesses:
    """One region's accesses by a launch whose points ask alike, not made yet: the
    requirement index `k` (one per region there) and the region's requirement per point,
    `col`. A one-shot plan reads a class member's accesses only by its key (their rects,
    regionclasses._AlikeSignatures), not as the (point, k, requirement) list: GPT-3 2.7B
    at 1,024 GPUs, Megatron t=8, made 3.9M such tuples that nothing read."""
    __slots__ = ("k", "col")

    def __init__(self, k: int, col: list):
        self.k, self.col = k, col

    def __len__(self) -> int:
        return len(self.col)


def accesses_list(accesses) -> list:
    """A region's accesses as by_region makes them (a DeferredAccesses made now)."""
    if type(accesses) is not DeferredAccesses:
        return accesses
    col = accesses.col
    return list(zip(range(len(col)), repeat(accesses.k), col))


def reads_list(reads) -> list:
    """A region's reads as by_region makes them (a DeferredReads made now)."""
    if type(reads) is not DeferredReads:
        return reads
    points = reads.points
    return list(zip(map(_first, points), map(_second, points), map(_rect, reads.col)))


def _by_region_loop(points) -> tuple[dict, dict]:
    reads: dict[str, list] = {}
    accesses: dict[str, list] = {}
    for pi, (color, device, reqs) in enumerate(points):
        for k, req in enumerate(reqs):
            name = req.region.name
            priv = req.privilege
            if priv is R or priv is RW:           # (priv.reads, without the property)
                got = reads.get(name)
                if got is None:
                    got = reads[name] = []
                got.append((color, device, req.rect))
            got = accesses.get(name)
            if got is None:
                got = accesses[name] = []
            got.append((pi, k, req))
    return reads, accesses


def _by_region_alike(points, deferred: bool = False,
                     known: bool = False) -> tuple[dict, dict] | None:
    """by_region when every point asks the same regions with the same privileges in the same
    order, each region once (the points of a launch differ in their rects and devices): per
    requirement index one list over the points, made and checked by C loops (map), not one
    dict lookup per point and requirement. None when the points differ."""
    if not points:
        return None
    reqs_of = list(map(_third, points))
    first = reqs_of[0]
    n, m = len(first), len(points)
    names = [req.region.name for req in first]
    if not known and (len(set(names)) != n or any(map(ne, map(len, reqs_of), repeat(n)))):
        return None
    # The columns by one transposition (the lengths are equal), each checked by two C list
    # comparisons (identity first; a region equal by value groups by its name alike).
    cols = list(zip(*reqs_of)) if n else []
    for req, col in zip(first, cols) if not known else ():
        if list(map(_region, col)) != [req.region] * m or \
                list(map(_privilege, col)) != [req.privilege] * m:
            return None
    reads: dict[str, list] = {}
    accesses: dict[str, list] = {}
    colors = devices = None
    for k, (name, col) in enumerate(zip(names, cols)):
        priv = first[k].privilege
        if (priv is R or priv is RW) and deferred:
            reads[name] = DeferredReads(points, col)
        elif priv is R or priv is RW:
            if colors is None:
                colors, devices = list(map(_first, points)), list(map(_second, points))
            reads[name] = list(zip(colors, devices, map(_rect, col)))
        accesses[name] = DeferredAccesses(k, col) if deferred else \
            list(zip(range(len(col)), repeat(k), col))
    return reads, accesses


_first, _second, _third = itemgetter(0), itemgetter(1), itemgetter(2)
_region, _privilege, _rect = attrgetter("region"), attrgetter("privilege"), attrgetter("rect")
