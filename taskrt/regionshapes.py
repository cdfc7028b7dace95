"""Regions planned alike up to the extent of their whole dimensions (a one-shot planner's
region classes, regionclasses.py).

A dimension along which every rect a region's log asks for, and every initial piece, spans
the whole region is planned trivially: every valid piece, copy, reduction, sum and buffer
rect spans it too (intersections and differences of such rects do), and what coherence.py
decides from the rects -- overlaps, containment, the order of pieces, the source of a copy
by the elements each holder has sent (every volume of the region is multiplied by the same
extent, so comparisons and ties are the same) -- does not depend on its extent. So two
regions whose logs ask the same things but for the extents of such dimensions (Inception's
convolutions of one batch split at other channel counts and image sizes; weights replicated
whole at other shapes) have one plan up to those extents: the class's template is planned
once and a member's nodes, Red+ targets and end state are the template's with the rects
moved to the member's extents along those dimensions (`shifter`). Data parallel Inception-v3
on 16 GPUs: 408 distinct region plans, 56 up to whole dimensions.

Only for a planner that is never re-planned, in plan_once (plan(): its members' plans are
stamped by stampedreads.py and read as it builds the tasks, and retire_region moves their
end state: `moved_info`); add_launches' classes (a re-plannable planner's too) and the
remembered plans (regionmemo.py) keep the exact key. GENERIC_CLASSES off: exact keys only
(the oracle of tests/taskrt/test_region_shapes.py).
"""
from __future__ import annotations

import weakref
from operator import itemgetter

from .geometry import Rect, _made
from .taskgraph import ReduceTarget

GENERIC_CLASSES = True

# A signature's access (regionmemo.key_signature): (point index, device, rect, privilege).
_rect_of = itemgetter(2)
_no_rect = itemgetter(0, 1, 3)


def shape_classes(groups, sigs: dict, sig_of: list, regions: dict, initial: dict) -> list:
    """The region classes from the exact classes `groups` (lists of region names, each in
    order of first use): exact classes whose keys are equal up to their regions' whole
    dimensions joined, members in order of first use (the order of `sigs`). The keys are
    made only for exact classes that a coarse key (those dimensions, the rest of the
    region's bounds, dtype, log length) does not already tell apart."""
    groups = list(groups)
    masks: dict = {}
    coarse: dict = {}
    for names in groups:
        name = names[0]
        region = regions[name]
        dims = _dims(region.rect, initial.get(name, ()), sigs[name], sig_of, masks)
        if dims:
            sig = sigs[name]
            coarse.setdefault((_canon(region.rect, dims), region.dtype,
                               tuple(map(len, map(sig_of.__getitem__, sig)))),
                              []).append((names, dims))
    canon_ids: dict = {}
    by_key: dict = {}
    for alike in coarse.values():
        if len(alike) > 1:
            for names, dims in alike:
                name = names[0]
                key = _key(regions[name], initial.get(name, ()), sigs[name], sig_of, dims,
                           canon_ids)
                by_key.setdefault(key, []).append(names)
    joined = {id(names[0]): [n for names in same for n in names]
              for same in by_key.values() if len(same) > 1 for names in same[:1]}
    if not joined:
        return groups
    order = {name: i for i, name in enumerate(sigs)}
    out, gone = [], set()
    for same in by_key.values():
        if len(same) > 1:
            gone.update(id(names) for names in same[1:])
    for names in groups:
        if id(names) in gone:
            continue
        got = joined.get(id(names[0]))
        out.append(names if got is None else sorted(got, key=order.__getitem__))
    return out


def _dims(whole: Rect, pieces, sig: list, sig_of: list, masks: dict) -> tuple:
    """The dimensions of a region (`whole`: its rect, of nonzero extent there) that every
    rect its log asks for (`sig`: its signature ids, sig_of[id] the signature) and every
    initial piece spans."""
    lo, hi = whole.lo, whole.hi
    dims = tuple(d for d in range(len(lo)) if hi[d] > lo[d])
    for sid in dict.fromkeys(sig):
        got = masks.get((sid, whole))
        if got is None:
            rects = {id(x[2]): x[2] for x in sig_of[sid][1:]}.values()
            got = masks[sid, whole] = _spanned(rects, lo, hi, dims)
        dims = tuple(d for d in dims if d in got)
        if not dims:
            return dims
    if pieces:
        dims = _spanned({id(r): r for r, _ in pieces}.values(), lo, hi, dims)
    return dims


def _key(region, pieces, sig: list, sig_of: list, dims: tuple, canon_ids: dict) -> tuple:
    """The key of a region's plan up to its whole dimensions `dims` (_dims): its signatures
    with the rects' bounds along `dims` left out (per signature and dims once, by C maps
    over its accesses: the accesses without their rects, then their rects' canonical forms
    by identity; ids in canon_ids)."""
    sids = []
    memo = canon_ids.setdefault("rects", {})
    for sid in sig:
        c = canon_ids.get((sid, dims))
        if c is None:
            s = sig_of[sid]
            body = s[1:]
            rects = list(map(_rect_of, body))
            canon = dict(zip(map(id, rects), rects))
            for i, r in canon.items():
                got = memo.get((i, dims))          # (the rects are held: sig_of)
                if got is None:
                    got = memo[i, dims] = _canon(r, dims)
                canon[i] = got
            form = (s[0], tuple(map(_no_rect, body)),
                    tuple(map(canon.__getitem__, map(id, rects))))
            c = canon_ids[sid, dims] = canon_ids.setdefault(("form", form), len(canon_ids))
        sids.append(c)
    return (_canon(region.rect, dims), region.dtype,
            tuple([(_canon(r, dims), d) for r, d in pieces]), tuple(sids))


def _spanned(rects, lo, hi, dims: tuple) -> tuple:
    """Those of `dims` along which every one of `rects` spans [lo, hi)."""
    return tuple(d for d in dims
                 if all(r.lo[d] == lo[d] and r.hi[d] == hi[d] for r in rects))


def _canon(r: Rect, dims: tuple) -> tuple:
    return tuple(None if d in dims else (r.lo[d], r.hi[d]) for d in range(len(r.lo)))


def shifter(whole: Rect, to: Rect):
    """A function moving a rect of a plan of the region `whole` to the region `to` (same
    dimensionality; they differ only along dimensions every rect of the plan spans): those
    dimensions' bounds become `to`'s. None when `whole` is `to`'s value (nothing moves)."""
    nd = len(whole.lo)
    dims = [d for d in range(nd) if whole.lo[d] != to.lo[d] or whole.hi[d] != to.hi[d]]
    if not dims:
        return None
    # Every rect spans `whole` along dims, so its volume is that extent's multiple.
    was = now = 1
    for d in dims:
        was *= whole.hi[d] - whole.lo[d]
        now *= to.hi[d] - to.lo[d]
    tlo, thi = to.lo, to.hi
    k = dims[0]
    suffix = dims == list(range(k, nd))     # (the common case: all, or all but the batch)
    flags = [d in dims for d in range(nd)]
    seen: dict = {id(whole): (whole, to)}   # id -> (rect, moved): held, so no id is reused

    def shift(r: Rect) -> Rect:
        got = seen.get(id(r))
        if got is not None and got[0] is r:
            return got[1]
        if suffix:
            lo, hi = r.lo[:k] + tlo[k:], r.hi[:k] + thi[k:]
        else:
            lo = tuple([t if f else v for v, t, f in zip(r.lo, tlo, flags)])
            hi = tuple([t if f else v for v, t, f in zip(r.hi, thi, flags)])
        moved = _made(lo, hi, r.volume // was * now)
        seen[id(r)] = (r, moved)
        return moved
    made: dict = {}

    def targets(t: tuple) -> tuple:
        """A task requirement's Red+ targets moved (one tuple per distinct value: the
        points of a launch mostly sum alike)."""
        got = made.get(t)
        if got is None:
            got = made[t] = tuple([ReduceTarget(shift(p), partial, acc)
                                   for p, partial, acc in t])
        return got
    shift.targets = targets
    return shift


def moved_info(planner, rp, info: tuple, shift, to: Rect) -> tuple:
    """graphview.region_info `info` of a template's RegionPlanner `rp` moved by `shift` to a
    member's region `to`: made once per (planner, region rect), shared by the members of that
    rect as region_info shares a frozen planner's (`planner._moved_info`, by the planner's id
    with a weak reference to it)."""
    key = (id(rp), to)
    known = planner._moved_info.get(key)
    if known is not None and known[0]() is rp:
        return known[1]
    moved: dict = {}

    def of(r):
        got = moved.get(r)
        if got is None:
            got = moved[r] = shift(r)
        return got
    instance, partial, initial, final_valid, pending = info
    info = ([(d, of(r)) for d, r in instance], [(d, of(r)) for d, r in partial],
            [(of(r), h) for r, h in initial], [(of(r), h) for r, h in final_valid],
            [(of(r), d, p) for r, d, p in pending])
    planner._moved_info[key] = (weakref.ref(rp), info)
    return info
