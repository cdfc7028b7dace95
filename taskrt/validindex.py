"""The index over a region's valid pieces as arrays (validkernels.py's store), so that the
compiled walk's queries and membership tests cost what they find, not what the store holds:

- a grid: a uniform grid of cells (2**shift per dimension: twice the pieces' typical extent,
  as RectIndex's grid_on_demand cells), hashed into a table of buckets, each a linked list
  of (position, next) entries; a piece touching more than MAXC cells goes to one extra
  bucket (`big`) that every query walks. A query gathers its cells' positions, live ones
  only, sorts them and drops duplicates: positions in insertion order, as a scan finds them.
  A killed piece's entries stay until its bucket holds as many dead entries as live ones
  (then that bucket is cleaned into a free list), so dead pieces cost at most ~2x per query.
  Built once a region holds more than gi[G_AT] live pieces (and dropped again under half
  that at a compaction); rebuilt (by the caller, validpieces.ValidPieces) when the table is
  4x overloaded or the typical extent drifts 4x from the cells (`wants`);
- rows: for a holder slice of gi[G_ROW_AT] or more holders, a row of int32 per device: the
  first offset of the device in the slice (-1: none). A slice's entries never change once
  written (a slice is only extended at the pool's end), so a row filled up to some length
  answers every piece sharing the slice (holds: offset < its count) and is extended when a
  longer count asks. Rows are dropped when the pool is compacted.

gi[]: the scalars below, then per dimension the pieces' summed bit lengths, the shift, and
two scratch spans of 3 x ndim (lo, hi, the current cell): one for updates, one for queries.
cells: (buckets + 1) x 3: head entry (-1: none), entries, dead entries; the last row is `big`.
ent: entries x 2: position, next entry. Plain Python; validkernels.kernels() compiles it.
"""
from __future__ import annotations

import numpy as np

# gi[]: grid on?, build past this many live pieces (-1: never), log2 of the buckets, entries
# used (high water), free list head, free entries, non-empty pieces indexed, pushes since the
# last drift check, why a kernel stopped, what it needs (positions, pool, free entries), rows
# from this many holders (0: off), rows used, rows wanted beyond mwhere's
G_ON, G_AT, G_TBITS, G_EUSED, G_FREE, G_NFREE, G_NSIZED, G_PUSHES, G_STOP, G_NEED_POS, \
    G_NEED_POOL, G_NEED_ENT, G_ROW_AT, G_NROWS, G_ROWS_WANTED = range(15)
G_DIMS = 16
STOP_NEED, STOP_WANT = 1, 2
MAXC = 32           # a piece touching more cells goes to the `big` bucket
COARSE = 1          # cells 2**COARSE x the typical extent
_HASH = 0x9E3779B1


def gi_size(nd: int) -> int:
    return G_DIMS + 8 * nd


def _bits(x):
    """(x).bit_length() for x >= 0."""
    k = 0
    while x > 0:
        x >>= 1
        k += 1
    return k


def _span(gi, r, nd, o):
    """The cells the rect r (lo then hi) touches: first and last per dimension into gi[o:],
    gi[o + nd:]; their number (capped at 2**40; 0 if r is empty)."""
    n = 1
    sh = G_DIMS + nd
    for d in range(nd):
        if r[nd + d] <= r[d]:
            return 0
        s = gi[sh + d]
        a = r[d] >> s
        b = (r[nd + d] - 1) >> s
        gi[o + d] = a
        gi[o + nd + d] = b
        f = b - a + 1
        n = n * f if n <= (1 << 40) // f else 1 << 40
    return n


def _start(gi, nd, o):
    for d in range(nd):
        gi[o + 2 * nd + d] = gi[o + d]


def _advance(gi, nd, o):
    """The span's next cell (last dimension fastest); False past the last."""
    c = o + 2 * nd
    for d in range(nd - 1, -1, -1):
        if gi[c + d] < gi[o + nd + d]:
            gi[c + d] += 1
            return True
        gi[c + d] = gi[o + d]
    return False


def _bucket(gi, nd, c):
    """The bucket of the cell gi[c:c + nd]."""
    mask = (1 << gi[G_TBITS]) - 1
    h = 0
    for d in range(nd):
        h = (h * _HASH + gi[c + d]) & mask
    return h


def _link(gi, cells, ent, b, p):
    e = gi[G_FREE]
    if e >= 0:
        gi[G_FREE] = ent[e, 1]
        gi[G_NFREE] -= 1
    else:
        e = gi[G_EUSED]
        gi[G_EUSED] = e + 1
    ent[e, 0] = p
    ent[e, 1] = cells[b, 0]
    cells[b, 0] = e
    cells[b, 1] += 1


def _sized(gi, box, p, nd, sign):
    for d in range(nd):
        gi[G_DIMS + d] += sign * _bits(box[p, nd + d] - box[p, d] - 1)
    gi[G_NSIZED] += sign


def index_add(gi, cells, ent, box, p, nd):
    """Enter the live piece p (room for MAXC entries ensured by the caller)."""
    o = G_DIMS + 2 * nd
    n = _span(gi, box[p], nd, o)
    if n == 0:
        return
    _sized(gi, box, p, nd, 1)
    gi[G_PUSHES] += 1
    if n > MAXC:
        _link(gi, cells, ent, cells.shape[0] - 1, p)
        return
    _start(gi, nd, o)
    while True:
        _link(gi, cells, ent, _bucket(gi, nd, o + 2 * nd), p)
        if not _advance(gi, nd, o):
            break


def _dead(gi, cells, ent, hold, b):
    """One more dead entry in bucket b; the bucket cleaned once they are half of it."""
    dead = cells[b, 2] + 1
    if dead < 8 or 2 * dead < cells[b, 1]:
        cells[b, 2] = dead
        return
    prev = -1
    e = cells[b, 0]
    while e >= 0:
        nxt = ent[e, 1]
        if hold[ent[e, 0], 1] == 0:
            if prev < 0:
                cells[b, 0] = nxt
            else:
                ent[prev, 1] = nxt
            ent[e, 1] = gi[G_FREE]
            gi[G_FREE] = e
            gi[G_NFREE] += 1
            cells[b, 1] -= 1
        else:
            prev = e
        e = nxt
    cells[b, 2] = 0


def index_kill(gi, cells, ent, box, hold, p, nd):
    """The piece p died (hold[p, 1] already 0): its buckets count a dead entry more."""
    o = G_DIMS + 2 * nd
    n = _span(gi, box[p], nd, o)
    if n == 0:
        return
    _sized(gi, box, p, nd, -1)
    if n > MAXC:
        _dead(gi, cells, ent, hold, cells.shape[0] - 1)
        return
    _start(gi, nd, o)
    while True:
        _dead(gi, cells, ent, hold, _bucket(gi, nd, o + 2 * nd))
        if not _advance(gi, nd, o):
            break


def entries_of(gi, box, p, part, nd, keep):
    """At most how many entries the pieces made of piece p take: Rect.subtract(p, part)'s
    (2 * nd at most), and `part` itself where `keep`; each inside p, so in at most p's cells
    (or MAXC)."""
    n = _span(gi, box[p], nd, G_DIMS + 2 * nd)
    whole = True
    for e in range(2 * nd):
        if part[e] != box[p, e]:
            whole = False
            break
    if whole:
        return keep * (n if n <= MAXC else 1)
    return (2 * nd + keep) * (n if n <= MAXC else MAXC)


def _gather(ent, hold, e, buf, c):
    """The live positions of the bucket list from entry e appended to buf[c:]; the new c."""
    while e >= 0:
        p = ent[e, 0]
        if hold[p, 1]:
            buf[c] = p
            c += 1
        e = ent[e, 1]
    return c


def candidates(gi, cells, ent, hold, meta, q, nd):
    """The live positions whose cells meet the rect q's, ascending, no duplicates: (array,
    count); count -1 where scanning every position costs less (or no grid)."""
    if gi[G_ON] == 0:
        return np.empty(0, np.int64), -1
    o = G_DIMS + 5 * nd
    n = _span(gi, q, nd, o)
    if n == 0:
        return np.empty(0, np.int64), 0
    if 8 * n > meta[1] + 64:            # (meta[M_NALIVE]) a large query: a scan costs less
        return np.empty(0, np.int64), -1
    big = cells.shape[0] - 1
    total = cells[big, 1]
    _start(gi, nd, o)
    while True:
        total += cells[_bucket(gi, nd, o + 2 * nd), 1]
        if not _advance(gi, nd, o):
            break
    if 4 * total > meta[0]:             # (meta[M_NPOS]) gathered and sorted: a scan costs less
        return np.empty(0, np.int64), -1
    buf = np.empty(total, np.int64)
    c = _gather(ent, hold, cells[big, 0], buf, 0)
    _start(gi, nd, o)
    while True:
        c = _gather(ent, hold, cells[_bucket(gi, nd, o + 2 * nd), 0], buf, c)
        if not _advance(gi, nd, o):
            break
    if c < 2:
        return buf, c
    found = np.sort(buf[:c])
    m = 1
    for k in range(1, c):
        if found[k] != found[m - 1]:
            found[m] = found[k]
            m += 1
    return found, m


def wants(gi, meta, nd):
    """Whether the caller should compact the store (dead positions past half, as
    ValidPieces.room does) or (re)build the grid, before the next query or update."""
    alive = meta[1]
    if meta[0] > 2 * alive + 64:
        return True
    if gi[G_ON] == 0:
        return nd > 0 and 0 <= gi[G_AT] < alive
    if gi[G_EUSED] - gi[G_NFREE] > 4 << gi[G_TBITS]:
        return True
    if gi[G_PUSHES] >= 8:
        gi[G_PUSHES] = 0
        n = gi[G_NSIZED]
        if n > 0:
            for d in range(nd):
                if abs((gi[G_DIMS + nd + d] - COARSE) * n - gi[G_DIMS + d]) > 2 * n:
                    return True
    return False


def build(box, hold, meta, gi):
    """The grid over the live pieces (cells, ent); gi set for it (G_ON)."""
    nd = box.shape[1] // 2
    npos = meta[0]
    sized = 0
    for d in range(nd):
        gi[G_DIMS + d] = 0
    for p in range(npos):
        if hold[p, 1] == 0:
            continue
        empty = False
        for d in range(nd):
            if box[p, nd + d] <= box[p, d]:
                empty = True
        if not empty:
            _sized(gi, box, p, nd, 1)
            sized += 1
    for d in range(nd):
        b = gi[G_DIMS + d]
        gi[G_DIMS + nd + d] = COARSE + ((2 * b + sized) // (2 * sized) if sized else 0)
    total = 0
    for p in range(npos):
        if hold[p, 1]:
            n = _span(gi, box[p], nd, G_DIMS + 2 * nd)
            total += n if n <= MAXC else (1 if n else 0)
    tbits = max(6, min(30, _bits(2 * total)))
    cells = np.zeros(((1 << tbits) + 1, 3), np.int64)
    cells[:, 0] = -1
    ent = np.empty((2 * total + 4 * MAXC, 2), np.int64)
    gi[G_ON] = 1
    gi[G_TBITS] = tbits
    gi[G_EUSED] = 0
    gi[G_FREE] = -1
    gi[G_NFREE] = 0
    gi[G_NSIZED] = 0
    for d in range(nd):
        gi[G_DIMS + d] = 0
    for p in range(npos):
        if hold[p, 1]:
            index_add(gi, cells, ent, box, p, nd)
    gi[G_PUSHES] = 0
    return cells, ent


def holds(pool, hold, p, device, gi, mrow, mwhere):
    """Whether the piece p's holders include `device`: by its slice's row where the slice is
    long (made when the slice is asked a second time, where mwhere has room, else counted in
    G_ROWS_WANTED; mrow: -1 never asked, -3 asked once, -2 no row: a device past the row),
    else by a scan."""
    s = hold[p, 0]
    c = hold[p, 1]
    at = gi[G_ROW_AT]
    if 0 < at <= c:
        r = mrow[s]
        if r == -1:                         # (first asked: a scan; a row if asked again)
            mrow[s] = -3
        elif r == -3:
            r = gi[G_NROWS]
            if r < mwhere.shape[0]:
                gi[G_NROWS] = r + 1
                mwhere[r, :] = -1
                mwhere[r, mwhere.shape[1] - 1] = 0
                mrow[s] = r
            else:
                gi[G_ROWS_WANTED] += 1
                r = -3
        if r >= 0:
            ncols = mwhere.shape[1] - 1
            have = mwhere[r, ncols]
            if have < c:
                for k in range(have, c):
                    h = pool[s + k]
                    if h < 0 or h >= ncols:         # (a device past the row: no row)
                        mrow[s] = -2
                        r = -2
                        break
                    if mwhere[r, h] < 0:
                        mwhere[r, h] = k
                if r >= 0:
                    mwhere[r, ncols] = c
            if r >= 0:
                if device < 0 or device >= ncols:
                    return False
                k = mwhere[r, device]
                return 0 <= k < c
    for k in range(s, s + c):
        if pool[k] == device:
            return True
    return False


# (build: an entry point of validkernels.kernels())
HELPERS = ("_bits", "_span", "_start", "_advance", "_bucket", "_link", "_sized", "index_add",
           "_dead", "index_kill", "entries_of", "_gather", "candidates", "wants", "holds")
