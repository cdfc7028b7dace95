"""geometry.py's rect operations over int64 rows (lo then hi per dimension), for the
compiled walk over a region's valid pieces (validkernels.py): the same results in the same
order as Rect.subtract, subtract_all and merge_adjacent (tests/taskrt/test_valid_pieces.py
compares the walks they serve). Plain Python; validkernels.kernels() compiles them."""
from __future__ import annotations

import numpy as np


def _volume(r, nd):
    v = 1
    for d in range(nd):
        e = r[nd + d] - r[d]
        if e <= 0:
            return 0
        v *= e
    return v


def _pieces(a, part, nd, out, m):
    """Rect.subtract(a, part) for `part` inside a, non-empty, into out[m:]: per dimension
    the part below the intersection, then above it, bounded by the intersection in the
    dimensions before. Returns the new count."""
    for d in range(nd):
        for side in range(2):
            if (a[d] < part[d]) if side == 0 else (part[nd + d] < a[nd + d]):
                for e in range(nd):
                    if e < d:
                        out[m, e], out[m, nd + e] = part[e], part[nd + e]
                    elif e == d:
                        if side == 0:
                            out[m, e], out[m, nd + e] = a[e], part[e]
                        else:
                            out[m, e], out[m, nd + e] = part[nd + e], a[nd + e]
                    else:
                        out[m, e], out[m, nd + e] = a[e], a[nd + e]
                m += 1
    return m


def _subtract_all(r, parts, count, nd):
    """geometry.subtract_all(r, parts[:count]): (rows, count)."""
    cur = np.empty((1, 2 * nd), np.int64)
    cur[0, :] = r
    n = 1 if _volume(r, nd) > 0 else 0
    inter = np.empty(2 * nd, np.int64)
    for k in range(count):
        if n == 0:
            break
        nxt = np.empty((n * max(2 * nd, 1), 2 * nd), np.int64)
        m = 0
        for a in range(n):
            empty = False
            whole = True
            for d in range(nd):
                lo = max(cur[a, d], parts[k, d])
                hi = min(cur[a, nd + d], parts[k, nd + d])
                if hi <= lo:
                    empty = True
                inter[d], inter[nd + d] = lo, hi
                if lo != cur[a, d] or hi != cur[a, nd + d]:
                    whole = False
            if empty:
                nxt[m, :] = cur[a]
                m += 1
            elif not whole:
                m = _pieces(cur[a], inter, nd, nxt, m)
        cur, n = nxt, m
    return cur, n


def _members(label, n, g, out):
    """Writes into `out` the indices i < n with label[i] == g, in order; returns how many."""
    c = 0
    for i in range(n):
        if label[i] == g:
            out[c] = i
            c += 1
    return c


def _merge_along(rs, n, d, nd, out):
    """geometry._merge_along of rs[:n] into out; the count (n when no two share a line:
    out is then not written)."""
    line = np.empty(n, np.int64)         # per rect: its line, numbered in first-seen order
    lines = 0
    for i in range(n):
        line[i] = -1
        for j in range(i):
            same = True
            for e in range(nd):
                if e != d and (rs[i, e] != rs[j, e] or rs[i, nd + e] != rs[j, nd + e]):
                    same = False
                    break
            if same:
                line[i] = line[j]
                break
        if line[i] < 0:
            line[i] = lines
            lines += 1
    if lines == n:
        return n
    m = 0
    members = np.empty(n, np.int64)
    for g in range(lines):
        c = _members(line, n, g, members)
        for a in range(1, c):            # stable insertion sort by lo[d]
            x = members[a]
            b = a - 1
            while b >= 0 and rs[members[b], d] > rs[x, d]:
                members[b + 1] = members[b]
                b -= 1
            members[b + 1] = x
        out[m, :] = rs[members[0], :]
        for a in range(1, c):
            r = members[a]
            if rs[r, d] == out[m, nd + d]:
                out[m, nd + d] = rs[r, nd + d]
            else:
                m += 1
                out[m, :] = rs[r, :]
        m += 1
    return m


def _merge(rs, n, nd):
    """geometry.merge_adjacent of the disjoint non-empty rs[:n] (n > 1): (rects, count)."""
    box = rs[0, :].copy()
    total = 0
    for i in range(n):
        total += _volume(rs[i], nd)
        for e in range(nd):
            if rs[i, e] < box[e]:
                box[e] = rs[i, e]
            if rs[i, nd + e] > box[nd + e]:
                box[nd + e] = rs[i, nd + e]
    if total == _volume(box, nd):
        out = np.empty((1, 2 * nd), np.int64)
        out[0, :] = box
        return out, 1
    cur = rs[:n].copy()
    nxt = np.empty_like(cur)
    quiet = 0
    d = 0
    while quiet < nd and n > 1:
        m = _merge_along(cur, n, d, nd, nxt)
        if m < n:
            cur, nxt = nxt, cur
            n = m
            quiet = 1
        else:
            quiet += 1
        d = d + 1 if d + 1 < nd else 0
    return cur, n


HELPERS = ("_volume", "_members", "_pieces", "_subtract_all", "_merge_along", "_merge")
