"""The compiled loops over a region's valid pieces (validpieces.py's arrays): a launch's reads
walked as coherence.RegionPlanner._copy_in walks them (the oracle, kept for the tests), and
the state updates set_only_holder / add_holder make.

The store: `box` (cap x 2*ndim: lo then hi per piece), `hold` (cap x 2: start and count of
its holders in `pool`, in the order they got its value, the writer first; count 0: a dead
position), `meta` [positions used, pieces alive, pool entries used]. A piece's position is
its insertion order (a renew or add appends, a removal marks it dead), so a scan in position
order answers as RectIndex.overlapping does. Holder slices are never written once made: a cut
piece shares its piece's slice, a new holder copies the slice to the pool's end plus itself.
`sent`: per device the elements copies took from it, -1 where none was ever counted (a dict
without the key). The queries go through validindex.py's grid, the holder tests through its
rows, once a region is large enough to pay. Every function here is plain Python too (numba
compiles it on first use, cached in __pycache__ as strategy/listsched.py's loops are).

The rules the walk keeps (each decides later queries' order, so the plan; design.md):
lacking pieces in insertion order, grouped by their first holder in first-seen order; a
one-piece group's source picked with its volume; a larger group's near (a holder on the
reader's rank) then far parts, each from one common holder picked with 0 elements where
there is one, else each piece from its own pick with 0; the group's elements counted per
source after it, in first-seen order; sources in the order pieces got them, each source's
pieces merged (geometry.merge_adjacent); then the reader added as a holder, piece by piece
in insertion order (a whole piece moves to the end with the reader appended, a cut one is
replaced by Rect.subtract's pieces, then the part).
"""
from __future__ import annotations

import numpy as np

from . import validgeometry, validindex
from .numbastart import loading_kernels
from .validgeometry import _members, _merge, _pieces, _subtract_all, _volume
from .validindex import (G_NEED_ENT, G_NEED_POOL, G_NEED_POS, G_ON, G_STOP, MAXC, STOP_NEED,
                         STOP_WANT, build, candidates, entries_of, holds, index_add,
                         index_kill, wants)

# ctl[]: the batch call's scalars in and out
C_NEXT, C_NOUT, C_NLOG, C_NLOGH, C_FPTR, C_FN, C_STATUS, C_COVERED, C_LOG = range(9)
C_NEED_POS, C_NEED_POOL, C_NEED_OUT, C_NEED_LOG, C_NEED_LOGH, C_NEED_ENT = range(9, 15)
CTL_SIZE = 15
# WANT: the store wants compacting or its grid (re)building first (validindex.wants)
DONE, NEED, UNCOVERED, FORCED_MISMATCH, WANT = 0, 1, 2, 3, 4
M_NPOS, M_NALIVE, M_POOL = 0, 1, 2
SET_ONLY, ADD_HOLDER = 0, 1       # apply()'s ops


def _overlap(box, p, q, nd):
    """Whether piece p and the rect q (lo then hi) share a point."""
    for d in range(nd):
        lo = box[p, d] if box[p, d] > q[d] else q[d]
        hi = box[p, nd + d] if box[p, nd + d] < q[nd + d] else q[nd + d]
        if hi <= lo:
            return False
    return True


def _meeting(box, hold, meta, gi, cells, ent, q, nd):
    """The live pieces meeting the rect q (lo then hi), in position (insertion) order: their
    positions, their parts of q (rows, lo then hi) and the parts' total volume. The grid's
    candidates (validindex.py) where it has one and they are fewer, else every position."""
    cand, n = candidates(gi, cells, ent, hold, meta, q, nd)
    scan = n < 0
    if scan:
        n = meta[M_NPOS]
    count = 0
    for k in range(n):
        p = k if scan else cand[k]
        if hold[p, 1] and _overlap(box, p, q, nd):
            count += 1
    idx = np.empty(count, np.int64)
    parts = np.empty((count, 2 * nd), np.int64)
    covered = 0
    c = 0
    for k in range(n):
        p = k if scan else cand[k]
        if hold[p, 1] and _overlap(box, p, q, nd):
            for d in range(nd):
                parts[c, d] = max(box[p, d], q[d])
                parts[c, nd + d] = min(box[p, nd + d], q[nd + d])
            covered += _volume(parts[c], nd)
            idx[c] = p
            c += 1
    return idx, parts, covered


def _push(box, hold, meta, gi, cells, ent, r, hs, hn):
    """Append a piece (rect r) with the holder slice (hs, hn) (entered in the grid)."""
    n = meta[M_NPOS]
    box[n, :] = r
    hold[n, 0] = hs
    hold[n, 1] = hn
    meta[M_NPOS] = n + 1
    meta[M_NALIVE] += 1
    if gi[G_ON] and hn:
        index_add(gi, cells, ent, box, n, box.shape[1] // 2)


def _kill(box, hold, meta, gi, cells, ent, p):
    hold[p, 1] = 0
    meta[M_NALIVE] -= 1
    if gi[G_ON]:
        index_kill(gi, cells, ent, box, hold, p, box.shape[1] // 2)


def _slice_plus(pool, meta, hs, hn, device):
    """A slice of the slice (hs, hn)'s holders then `device`; its start. The slice itself,
    extended, where it ends the pool (a piece renewed holder after holder: a weight read
    by its n replicas costs n entries, not n^2); pieces sharing it keep their count."""
    s = meta[M_POOL]
    if hs + hn == s:
        pool[s] = device
        meta[M_POOL] = s + 1
        return hs
    pool[s:s + hn] = pool[hs:hs + hn]
    pool[s + hn] = device
    meta[M_POOL] = s + hn + 1
    return s


def _cut(box, hold, meta, gi, cells, ent, p, part, nd, hs, hn):
    """Rect.subtract(piece p, part) (part inside it), each appended with the holder slice
    (hs, hn)."""
    out = np.empty((2 * nd, 2 * nd), np.int64)
    for k in range(_pieces(box[p], part, nd, out, 0)):
        _push(box, hold, meta, gi, cells, ent, out[k], hs, hn)


def _give(box, hold, pool, meta, gi, cells, ent, p, part, device, nd):
    """add_holder_to for one piece p and its part: the part gets `device` as a holder."""
    whole = True
    for e in range(2 * nd):
        if part[e] != box[p, e]:
            whole = False
            break
    hs, hn = hold[p, 0], hold[p, 1]
    _kill(box, hold, meta, gi, cells, ent, p)
    if not whole:
        _cut(box, hold, meta, gi, cells, ent, p, part, nd, hs, hn)
    s = _slice_plus(pool, meta, hs, hn, device)
    _push(box, hold, meta, gi, cells, ent, part, s, hn + 1)


def _choose(cand, nc, device, elements, sent, ranks, ctl, log, logh, forced, forcedh):
    """RegionPlanner._choose_source over the holders cand[:nc]: a forced choice first where
    any is left (checked, not counted, not logged), else the least-sent holder on the
    reader's rank (ties: the earliest), else the least-sent of all; counted; logged when
    asked."""
    f = ctl[C_FPTR]
    if f < ctl[C_FN]:
        ok = forced[f, 0] == device and forced[f, 1] == elements and forced[f, 4] == nc
        if ok:
            o = forced[f, 3]
            for k in range(nc):
                if forcedh[o + k] != cand[k]:
                    ok = False
                    break
        if not ok:
            ctl[C_STATUS] = FORCED_MISMATCH
            return -1
        ctl[C_FPTR] = f + 1
        return forced[f, 2]
    if nc == 1:
        src = cand[0]
    else:
        rank = ranks[device]
        src = -1
        low = 0
        first = -1
        least = 0
        for k in range(nc):
            h = cand[k]
            n = sent[h] if sent[h] > 0 else 0
            if ranks[h] == rank:
                if src < 0 or n < low:
                    src, low = h, n
            elif src < 0 and (first < 0 or n < least):
                first, least = h, n
        if src < 0:
            src = first
    sent[src] = (sent[src] if sent[src] > 0 else 0) + elements
    if ctl[C_LOG]:
        i, o = ctl[C_NLOG], ctl[C_NLOGH]
        log[i, 0], log[i, 1], log[i, 2], log[i, 3], log[i, 4] = device, elements, src, o, nc
        logh[o:o + nc] = cand[:nc]
        ctl[C_NLOG], ctl[C_NLOGH] = i + 1, o + nc
    return src


def copy_reads(box, hold, pool, meta, gi, cells, ent, mrow, mwhere, sent, ranks, reads, ctl,
               out, log, logh, forced, forcedh):
    """RegionPlanner._copy_in for reads[ctl[C_NEXT]:] (rows: device, lo, hi), in order: the
    copies into out (rows: read index, source, volume, lo, hi), the reader added as a holder, the
    choices counted in `sent`. Stops DONE, or at a read with NEED (room: ctl[C_NEED_*], the
    read untouched), WANT (validindex.wants), UNCOVERED (ctl[C_COVERED] of its elements ever
    written) or a FORCED_MISMATCH; ctl[C_NEXT] is that read."""
    nd = box.shape[1] // 2
    for j in range(ctl[C_NEXT], reads.shape[0]):
        ctl[C_NEXT] = j
        if wants(gi, meta, nd):
            ctl[C_STATUS] = WANT
            return
        device = reads[j, 0]
        q = reads[j, 1:]
        found, met, covered = _meeting(box, hold, meta, gi, cells, ent, q, nd)
        count = found.shape[0]
        idx = np.empty(count, np.int64)
        parts = np.empty((count, 2 * nd), np.int64)
        m = 0
        holders = 0
        need_ent = 0
        for k in range(count):
            p = found[k]
            if holds(pool, hold, p, device, gi, mrow, mwhere):
                continue
            idx[m] = p
            parts[m, :] = met[k, :]
            holders += hold[p, 1]
            if gi[G_ON]:
                need_ent += entries_of(gi, box, p, met[k], nd, 1)
            m += 1
        if covered != _volume(q, nd):
            ctl[C_STATUS] = UNCOVERED
            ctl[C_COVERED] = covered
            return
        if m == 0:
            continue
        need_pos = meta[M_NPOS] + m * (2 * nd + 1)
        need_pool = meta[M_POOL] + holders + m
        need_out = ctl[C_NOUT] + m
        need_log = ctl[C_NLOG] + 3 * m + 2 if ctl[C_LOG] else 0
        need_logh = ctl[C_NLOGH] + 2 * holders + 2 * m + 2 if ctl[C_LOG] else 0
        if need_pos > box.shape[0] or need_pool > pool.shape[0] or \
                need_out > out.shape[0] or need_log > log.shape[0] or \
                need_logh > logh.shape[0] or _short(gi, ent, need_ent):
            ctl[C_STATUS] = NEED
            ctl[C_NEED_POS], ctl[C_NEED_POOL], ctl[C_NEED_OUT] = need_pos, need_pool, need_out
            ctl[C_NEED_LOG], ctl[C_NEED_LOGH] = need_log, need_logh
            ctl[C_NEED_ENT] = need_ent
            return
        # by_writer: groups by first holder, first-seen order
        group = np.empty(m, np.int64)
        writers = np.empty(m, np.int64)
        ngroups = 0
        for k in range(m):
            w = pool[hold[idx[k], 0]]
            group[k] = -1
            for g in range(ngroups):
                if writers[g] == w:
                    group[k] = g
                    break
            if group[k] < 0:
                writers[ngroups] = w
                group[k] = ngroups
                ngroups += 1
        src_of = np.empty(m, np.int64)      # per lacking piece: its source
        given = np.empty(m, np.int64)       # the pieces in the order they got a source
        ngiven = 0
        items = np.empty(m, np.int64)
        near = np.empty(m, np.int64)
        far = np.empty(m, np.int64)
        cand = np.empty(max(holders, 1), np.int64)
        csrc = np.empty(m, np.int64)        # a group's counts: sources, first-seen order
        cels = np.empty(m, np.int64)
        rank = ranks[device]
        for g in range(ngroups):
            ni = _members(group, m, g, items)
            if ni == 1:
                k = items[0]
                p = idx[k]
                s, c = hold[p, 0], hold[p, 1]
                src = _choose(pool[s:s + c], c, device, _volume(parts[k], nd), sent, ranks,
                              ctl, log, logh, forced, forcedh)
                if src < 0:
                    return
                src_of[k] = src
                given[ngiven] = k
                ngiven += 1
                continue
            nn = nf = 0
            for a in range(ni):
                k = items[a]
                p = idx[k]
                close = False
                for h in pool[hold[p, 0]:hold[p, 0] + hold[p, 1]]:
                    if ranks[h] == rank:
                        close = True
                        break
                if close:
                    near[nn] = k
                    nn += 1
                else:
                    far[nf] = k
                    nf += 1
            ncounts = 0
            for half in range(2):
                part = near if half == 0 else far
                np_ = nn if half == 0 else nf
                one = -1
                if np_ > 1:
                    p0 = idx[part[0]]
                    nc = 0
                    for h in pool[hold[p0, 0]:hold[p0, 0] + hold[p0, 1]]:
                        if half == 0 and ranks[h] != rank:
                            continue
                        common = True
                        for a in range(1, np_):
                            if not holds(pool, hold, idx[part[a]], h, gi, mrow, mwhere):
                                common = False
                                break
                        if common:
                            cand[nc] = h
                            nc += 1
                    if nc:
                        one = _choose(cand, nc, device, 0, sent, ranks, ctl, log, logh,
                                      forced, forcedh)
                        if one < 0:
                            return
                for a in range(np_):
                    k = part[a]
                    src = one
                    if src < 0:
                        p = idx[k]
                        s, c = hold[p, 0], hold[p, 1]
                        src = _choose(pool[s:s + c], c, device, 0, sent, ranks, ctl, log,
                                      logh, forced, forcedh)
                        if src < 0:
                            return
                    v = _volume(parts[k], nd)
                    found = False
                    for b in range(ncounts):
                        if csrc[b] == src:
                            cels[b] += v
                            found = True
                            break
                    if not found:
                        csrc[ncounts] = src
                        cels[ncounts] = v
                        ncounts += 1
                    src_of[k] = src
                    given[ngiven] = k
                    ngiven += 1
            for b in range(ncounts):
                cand[0] = csrc[b]
                if _choose(cand, 1, device, cels[b], sent, ranks, ctl, log, logh, forced,
                           forcedh) < 0:
                    return
        # by_source: sources in the order pieces got them, each one's pieces merged
        done = np.zeros(m, np.bool_)
        rs = np.empty((m, 2 * nd), np.int64)
        o = ctl[C_NOUT]
        for a in range(ngiven):
            if done[a]:
                continue
            src = src_of[given[a]]
            c = 0
            for b in range(a, ngiven):
                if not done[b] and src_of[given[b]] == src:
                    done[b] = True
                    rs[c, :] = parts[given[b]]
                    c += 1
            if c > 1:
                merged, c = _merge(rs, c, nd)
            else:
                merged = rs
            for b in range(c):
                out[o, 0] = j
                out[o, 1] = src
                out[o, 2] = _volume(merged[b], nd)
                out[o, 3:] = merged[b]
                o += 1
        ctl[C_NOUT] = o
        for k in range(m):
            _give(box, hold, pool, meta, gi, cells, ent, idx[k], parts[k], device, nd)
    ctl[C_NEXT] = reads.shape[0]
    ctl[C_STATUS] = DONE


def _short(gi, ent, need):
    """Whether the grid (if on) lacks `need` free entries."""
    return gi[G_ON] != 0 and need > ent.shape[0] - gi[validindex.G_EUSED] + \
        gi[validindex.G_NFREE]


def _stop(gi, why, need_pos, need_pool, need_ent):
    gi[G_STOP] = why
    gi[G_NEED_POS], gi[G_NEED_POOL], gi[G_NEED_ENT] = need_pos, need_pool, need_ent


def apply(box, hold, pool, meta, gi, cells, ent, mrow, mwhere, ops, devices, start):
    """The queued state changes ops[start:] in order (rows: lo, hi, kind, the number of its
    devices, taken in order from `devices`). SET_ONLY (RegionState.set_only_holder): each
    piece overlapping the rect replaced by what Rect.subtract leaves of it (its holders),
    then the rect held by its devices alone. ADD_HOLDER (RegionState.add_holder): each piece
    overlapping the rect gets the device as a holder of its part of it (add_holder_to), then
    what none covers (subtract_all) is added, held by the device alone. Returns the op it
    stopped at (that op untouched; gi[G_STOP] says why: STOP_NEED for lack of room, what it
    needs in gi[G_NEED_*], or STOP_WANT, validindex.wants; the caller makes room or
    compacts or builds the grid, and calls again), or the number of ops."""
    nd = box.shape[1] // 2
    o = 0
    for i in range(start):
        o += ops[i, 2 * nd + 1]
    for i in range(start, ops.shape[0]):
        if wants(gi, meta, nd):
            _stop(gi, STOP_WANT, 0, 0, 0)
            return i
        r = ops[i, :2 * nd]
        nh = ops[i, 2 * nd + 1]
        n = meta[M_NPOS]
        idx, parts, covered = _meeting(box, hold, meta, gi, cells, ent, r, nd)
        count = idx.shape[0]
        if ops[i, 2 * nd] == SET_ONLY:
            need_ent = 0
            if gi[G_ON]:
                need_ent = MAXC
                for k in range(count):
                    need_ent += entries_of(gi, box, idx[k], parts[k], nd, 0)
            if n + 2 * nd * count + 1 > box.shape[0] or meta[M_POOL] + nh > pool.shape[0] \
                    or _short(gi, ent, need_ent):
                _stop(gi, STOP_NEED, n + 2 * nd * count + 1, meta[M_POOL] + nh, need_ent)
                return i
            for k in range(count):
                p = idx[k]
                hs, hn = hold[p, 0], hold[p, 1]
                _kill(box, hold, meta, gi, cells, ent, p)
                _cut(box, hold, meta, gi, cells, ent, p, parts[k], nd, hs, hn)
            s = meta[M_POOL]
            pool[s:s + nh] = devices[o:o + nh]
            meta[M_POOL] = s + nh
            _push(box, hold, meta, gi, cells, ent, r, s, nh)
            o += nh
            continue
        device = devices[o]
        o += 1
        need_pos = n + 1
        need_pool = meta[M_POOL] + 1
        need_ent = 0
        lacking = np.empty(count, np.bool_)
        for k in range(count):
            lacking[k] = not holds(pool, hold, idx[k], device, gi, mrow, mwhere)
            if lacking[k]:
                need_pos += 2 * nd + 1
                need_pool += hold[idx[k], 1] + 1
                if gi[G_ON]:
                    need_ent += entries_of(gi, box, idx[k], parts[k], nd, 1)
        rest, u = _subtract_all(r, parts, count, nd) if covered != _volume(r, nd) else \
            (parts, 0)
        if gi[G_ON]:
            need_ent += u * MAXC
        if need_pos + u > box.shape[0] or need_pool > pool.shape[0] or \
                _short(gi, ent, need_ent):
            _stop(gi, STOP_NEED, need_pos + u, need_pool, need_ent)
            return i
        for k in range(count):
            if lacking[k]:
                _give(box, hold, pool, meta, gi, cells, ent, idx[k], parts[k], device, nd)
        if u:
            s = meta[M_POOL]
            pool[s] = device
            meta[M_POOL] = s + 1
            for k in range(u):
                _push(box, hold, meta, gi, cells, ent, rest[k], s, 1)
    return ops.shape[0]


def overlapping(box, hold, meta, gi, cells, ent, r):
    """Positions of the live pieces overlapping r, in insertion order."""
    nd = box.shape[1] // 2
    cand, n = candidates(gi, cells, ent, hold, meta, r, nd)
    scan = n < 0
    if scan:
        n = meta[M_NPOS]
    found = np.empty(n, np.int64)
    c = 0
    for k in range(n):
        p = k if scan else cand[k]
        if hold[p, 1] and _overlap(box, p, r, nd):
            found[c] = p
            c += 1
    return found[:c]


def compact(box, hold, pool, meta, nbox, nhold, npool):
    """The live pieces into nbox/nhold in order, their holder slices into npool (a slice
    shared by pieces stays shared where the later ones need no more of it); meta updated."""
    n = meta[M_NPOS]
    moved = np.full(pool.shape[0] + 1, -1, np.int64)     # old slice start -> new
    length = np.zeros(pool.shape[0] + 1, np.int64)       # ... and the length copied
    c = 0
    used = 0
    for p in range(n):
        hn = hold[p, 1]
        if hn == 0:
            continue
        hs = hold[p, 0]
        ns = moved[hs]
        if ns < 0 or length[hs] < hn:      # (a slice extended since: a longer one)
            ns = used
            npool[used:used + hn] = pool[hs:hs + hn]
            used += hn
            moved[hs] = ns
            length[hs] = hn
        nbox[c, :] = box[p, :]
        nhold[c, 0] = ns
        nhold[c, 1] = hn
        c += 1
    meta[M_NPOS] = c
    meta[M_NALIVE] = c
    meta[M_POOL] = used


_HELPERS = ("_overlap", "_meeting", "_push", "_kill", "_slice_plus", "_cut", "_give",
            "_choose", "_short", "_stop")
_ENTRIES = ("copy_reads", "apply", "overlapping", "compact", "build")
_compiled: dict = {}     # entry name -> its dispatcher, loaded (kernel)
_helpers_jitted = False
_DEPS = None        # _stamped's file digests (a test plants others)


def _stamped(dispatcher):
    """`dispatcher` (cache=True, nothing compiled yet) with the stamps of validgeometry.py
    and validindex.py joined to its own file's in its cache's key: numba checks only the
    file a function is in, and the loops here compile those modules' helpers into their
    machine code, so an edit there (not here) would otherwise load stale code."""
    import hashlib
    cache = getattr(dispatcher, "_cache", None)
    index = getattr(cache, "_cache_file", None)
    if index is None or not hasattr(index, "_source_stamp"):
        raise RuntimeError("numba's cache has changed (no _cache._cache_file._source_stamp):"
                           " taskrt/validkernels.py's _stamped needs updating for it")
    deps = _DEPS
    if deps is None:
        deps = tuple(hashlib.sha256(open(m.__file__, "rb").read()).digest()
                     for m in (validgeometry, validindex))
    index._source_stamp = (index._source_stamp, deps)
    return dispatcher


def kernels(compiled: bool = True):
    """The entry points (copy_reads, apply, overlapping, compact, validindex.build), each as
    `kernel` gives it: all of them numba-compiled (precompile, tests) or the plain Python
    functions (compiled=False: tests)."""
    return tuple(kernel(name, compiled) for name in _ENTRIES)


def kernel(name: str, compiled: bool = True):
    """The entry point `name` (of _ENTRIES): numba-compiled on first use, one signature
    (cached on disk next to this file, keyed on this file and the two whose helpers it
    holds: _stamped; a later process loads the machine code), or the plain Python function
    (compiled=False). Each is loaded only when asked for: a build of Inception-v3 @16 or of
    GPT-3 2.7B @128 never queries pieces from Python (overlapping) nor grids a region
    (build), ~0.025 s of loading saved."""
    g = globals()
    if not compiled:
        return g[name]
    got = _compiled.get(name)
    if got is None:
        from numba import njit
        with loading_kernels():                   # (numbastart.py)
            _jit_helpers(njit)
            got = _stamped(njit(cache=True, nogil=True)(g[name]))
            got.compile(_signature(name))
            got.disable_compile()       # (as njit(signature) does: that one only)
        _compiled[name] = got
    return got


def _jit_helpers(njit) -> None:
    """The helpers the entry points call, as numba dispatchers (once): a cache miss compiles
    them into the entry's machine code."""
    global _helpers_jitted
    if _helpers_jitted:
        return
    g = globals()
    for module in (validgeometry, validindex):  # (compiled where they call each other)
        vm = vars(module)
        for name in module.HELPERS:
            g[name] = vm[name] = njit(cache=True, nogil=True)(vm[name])
    for name in _HELPERS:
        g[name] = _stamped(njit(cache=True, nogil=True)(g[name]))
    _helpers_jitted = True


def _signature(name: str):
    """The one signature entry point `name` is compiled for."""
    from numba import types
    a1, a2, i8 = types.int64[::1], types.int64[:, ::1], types.int64
    w2 = types.int32[:, ::1]
    store = (a2, a2, a1, a1)                # box, hold, pool, meta
    index = (a1, a2, a2)                    # gi, cells, ent (validindex.py)
    rows = (a1, w2)                         # mrow, mwhere
    return {"copy_reads": store + index + rows + (a1, a1, a2, a1, a2, a2, a1, a2, a1),
            "apply": store + index + rows + (a2, a1, i8),
            "overlapping": (a2, a2, a1) + index + (a1,),
            "compact": store + (a2, a2, a1),
            "build": types.UniTuple(a2, 2)(a2, a2, a1, a1)}[name]
