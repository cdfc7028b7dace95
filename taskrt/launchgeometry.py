"""A launch's pending-sum geometry in one call: which sums each of its reductions meets, and
what retiring them leaves, walked over arrays (coherence.RegionPlanner._reduce_for_reads).

A launch's reductions meet the pending sums in their read rects, one rect after another, and
each retires what it met (pendingsums.LaunchSums.retire: a sum loses its part of the rect,
its pieces go to the end). Which sums a rect meets depends only on the rects before it, not
on what the reductions emit (a reduce, an all-reduce or nothing: each retires its sums met
by its rect), so `walk_sums` plays all of them at once on the sums' bounds (one compiled
call), with Rect.subtract's pieces in its order and LaunchSums' bookkeeping of which sums
end whole, replaced by one piece or gone. `LaunchGeometry` then answers the launch's
`overlapping` calls (its rects in order, each once) from that, `retire` does nothing, and
`close` puts the result into PendingSums as LaunchSums.close does. LaunchSums (and the index
behind it) is the oracle: COMPILED_LAUNCH_SUMS off selects it
(tests/taskrt/test_launch_geometry.py compares the two).
"""
from __future__ import annotations

import numpy as np

from .geometry import _made
from .numbastart import blas_probe_skipped
from .pendingsums import LaunchSums, PendingSums, sums_met

# Off: every launch's reductions on pendingsums.LaunchSums (the oracle).
COMPILED_LAUNCH_SUMS = True
_COMPILED = True        # walk_sums numba-compiled (off: plain Python, for tests)


def walk_sums(sums: np.ndarray, rects: np.ndarray):
    """The launch's reductions played on the pending sums: `sums` (S, 2 nd) their bounds in
    insertion order, `rects` (R, 2 nd) the read rects in order. Returns (bounds, cols, met,
    offsets, gone): `bounds` of every item (the S sums, then each piece a retirement made,
    in the order made); per item (`cols`) the sum it comes from, whether it is alive at the
    end, the sum it is all that is left of (-1: none) and its volume; `met`: the items each
    rect meets, in insertion order (rect k: met[offsets[k]:offsets[k + 1]]); `gone`: the
    sums retired whole or into several pieces, in order (LaunchSums' bookkeeping)."""
    n, w = sums.shape
    nd = w // 2
    cap = 2 * n + 16
    bounds = np.empty((cap, w), np.int64)
    cols = np.zeros((cap, 4), np.int64)         # sum of origin, alive, heir of, volume
    bounds[:n] = sums
    for i in range(n):
        cols[i, 0] = i
        cols[i, 1] = 1
        cols[i, 2] = i
    order = np.empty(cap, np.int64)     # the items alive, in insertion order: order[:live]
    for i in range(n):
        order[i] = i
    live = total = n
    met = np.empty(max(16, 4 * n), np.int64)
    nmet = 0
    offsets = np.zeros(rects.shape[0] + 1, np.int64)
    gone = np.empty(n, np.int64)
    ngone = 0
    lo = np.empty(nd, np.int64)
    hi = np.empty(nd, np.int64)
    for k in range(rects.shape[0]):
        r = rects[k]
        empty = False
        for d in range(nd):
            if r[nd + d] <= r[d]:
                empty = True
        first = nmet
        if not empty:
            for p in range(live):           # the items meeting r, in insertion order
                i = order[p]
                meets = True
                for d in range(nd):
                    if bounds[i, d] >= r[nd + d] or r[d] >= bounds[i, nd + d]:
                        meets = False
                        break
                if meets:
                    if nmet == met.shape[0]:
                        grown = np.empty(2 * nmet, np.int64)
                        grown[:nmet] = met
                        met = grown
                    met[nmet] = i
                    nmet += 1
        offsets[k + 1] = nmet
        if nmet == first:
            continue
        need = total + 2 * nd * (nmet - first)
        if need > bounds.shape[0]:
            bounds2 = np.empty((2 * need, w), np.int64)
            bounds2[:total] = bounds[:total]
            bounds = bounds2
            cols2 = np.zeros((2 * need, 4), np.int64)
            cols2[:total] = cols[:total]
            cols = cols2
            order2 = np.empty(2 * need, np.int64)
            order2[:live] = order[:live]
            order = order2
        made_from = total
        for q in range(first, nmet):        # each loses its part of r (LaunchSums.retire)
            i = met[q]
            cols[i, 1] = 0
            made = total
            for d in range(nd):
                lo[d] = bounds[i, d]
                hi[d] = bounds[i, nd + d]
            # Rect.subtract(item, r): per dimension in order, the part below and the part
            # above the intersection, limited to the intersection in the dimensions before.
            for d in range(nd):
                a = max(bounds[i, d], r[d])
                c = min(bounds[i, nd + d], r[nd + d])
                top = bounds[i, nd + d]
                for half in range(2):
                    if half == 0:
                        if lo[d] >= a:
                            continue
                        hi[d] = a
                    else:
                        if c >= top:
                            continue
                        lo[d] = c
                        hi[d] = top
                    volume = 1
                    for e in range(nd):
                        bounds[total, e] = lo[e]
                        bounds[total, nd + e] = hi[e]
                        volume *= hi[e] - lo[e]
                    cols[total, 0] = cols[i, 0]
                    cols[total, 1] = 1
                    cols[total, 2] = -1
                    cols[total, 3] = volume
                    total += 1
                lo[d] = a
                hi[d] = c
            origin = cols[i, 2]
            if origin >= 0:
                if total - made == 1:
                    cols[made, 2] = origin
                else:
                    gone[ngone] = origin
                    ngone += 1
        alive = 0                           # the pieces made go to the end, in order
        for p in range(live):
            i = order[p]
            if cols[i, 1]:
                order[alive] = i
                alive += 1
        for i in range(made_from, total):
            order[alive] = i
            alive += 1
        live = alive
    return bounds[:total], cols[:total], met[:nmet], offsets, gone[:ngone]


_walk = None


def _walker():
    """walk_sums numba-compiled on first use (cached on disk next to this file), or the
    plain function (_COMPILED off)."""
    global _walk
    if not _COMPILED:
        return walk_sums
    if _walk is None:
        from numba import njit, types
        a2 = types.int64[:, ::1]
        with blas_probe_skipped():              # (numbastart.py)
            entry = njit(cache=True, nogil=True)(walk_sums)
            entry.compile((a2, a2))
            entry.disable_compile()
        _walk = entry
    return _walk


class LaunchGeometry:
    """pendingsums.LaunchSums' API over walk_sums: the pending sums meeting the bounding box
    of a launch's read rects (`rects`, distinct, in the order the launch reduces them)
    found, and all its reductions' meetings and retirements played at once. `overlapping`
    answers each rect (once, in that order) with the sums it meets as (key, rect, (device,
    partial)), `retire` of what it answered does nothing (played already), and `close` puts
    the result into `pending`. `apart` as LaunchSums'."""
    __slots__ = ("_pending", "_met", "_items", "_ids", "_gone", "_left", "apart")

    def __init__(self, pending: PendingSums, rects):
        rects = list(rects)
        found, self.apart = sums_met(pending, rects)
        self._pending = pending
        self._met: dict | None = None     # (None: no sums met)
        self._ids = self._gone = self._left = ()
        if not found:
            return
        bounds, cols, met, offsets, gone = _walker()(
            np.array([r.lo + r.hi for _, r, _ in found], np.int64),
            np.array([r.lo + r.hi for r in rects], np.int64))
        n, nd = len(found), len(rects[0].lo)
        # every item as (key, rect, value): the sums found as they are, the pieces left by
        # retirements (negative keys) made here
        items = found + [(-k, _made(tuple(row[:nd]), tuple(row[nd:]), c[3]), found[c[0]][2])
                         for k, (row, c) in enumerate(zip(bounds[n:].tolist(),
                                                          cols[n:].tolist()), n)]
        met, offsets = met.tolist(), offsets.tolist()
        self._met = {rect: [items[i] for i in met[offsets[k]:offsets[k + 1]]]
                     for k, rect in enumerate(rects)}
        self._ids = [i for i, _, _ in found]
        self._gone = gone.tolist()
        # the pieces alive at the end, in order, with the sum each is all that is left of
        self._left = [(items[k][1], items[k][2], c[2])
                      for k, c in enumerate(cols[n:].tolist(), n) if c[1]]

    def overlapping(self, rect) -> list:
        """The sums `rect` (one of the launch's rects, asked in their order) meets."""
        met = self._met
        return [] if met is None else met[rect]

    def retire(self, rect, found) -> None:
        """(Played by walk_sums already.)"""

    def close(self) -> None:
        """Put the result back into `pending`, as LaunchSums.close does."""
        pending, ids = self._pending, self._ids
        for g in self._gone:
            pending.remove(ids[g])
        for rect, value, heir in self._left:
            if heir < 0:
                pending.add(rect, value)
            else:
                pending.replace(ids[heir], rect)


def launch_sums(pending: PendingSums, rects):
    """The launch's sums (LaunchGeometry; LaunchSums with COMPILED_LAUNCH_SUMS off)."""
    if COMPILED_LAUNCH_SUMS:
        return LaunchGeometry(pending, rects)
    return LaunchSums(pending, rects)
