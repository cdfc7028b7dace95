"""A region's valid pieces as arrays (ValidPieces), the coherence state over them (PieceState)
and the elements sent per device as an array (SentCounts): what coherence.RegionPlanner
plans a region's reads with when coherence.COMPILED_READS is on (the default), each
launch's reads walked by one compiled call (validkernels.copy_reads), its queries through
validindex.py's grid and holder rows.

The Python walk over a RectIndex (coherence.RegionState, RegionPlanner._copy_in) is the
oracle (tests/taskrt/test_valid_pieces.py compares the two on random region programs;
COMPILED_READS off selects it). The answers are the same: the valid pieces in
insertion order with their holders in order, the copies (rect, source) in order, the sent
counts. What differs is only where rects are objects: a piece's Rect is made when Python
asks for it (overlapping, iteration), a copy's from the kernel's rows.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

from .errors import PlanError
from .geometry import Rect, _made
from .pendingsums import PendingSums
from .region import Region
from . import validindex as vi
from . import validkernels as vk

_MIN_ROOM = 16          # positions of room ensured before a call (it asks for more if needed)
_COMPILED = True        # the kernels numba-compiled (off: plain Python, for debugging)
# The grid over a region's pieces (validindex.py): built once it holds more than GRID_AT live
# pieces (-1: never; the tests also run 0, so that small programs go through it). Holder
# rows for slices of max(ROW_AT, devices // ROW_RATIO) holders or more (ROW_AT 0: never).
GRID_AT = 128
ROW_AT = 64
ROW_RATIO = 32


_NO_LOG = np.empty((0, 5), np.int64)     # (no choices logged or forced: never written)
_NONE = np.empty(0, np.int64)
_NO_CELLS = np.full((1, 3), -1, np.int64)    # (no grid: never read nor written)
_NO_ENT = np.empty((0, 2), np.int64)
# copy_reads' control block and copies, per ndim (one call at a time: read back before the next)
_CTL = np.zeros(vk.CTL_SIZE, np.int64)
_OUT: dict = {}


# validkernels' entry points by name, each loaded on its first call here (vk.kernel)
_made_kernels: dict = {}


def _kernel(name: str):
    """validkernels.kernel(name), kept once loaded."""
    got = _made_kernels.get(name)
    if got is None:
        got = vk.kernel(name, _COMPILED)
        if _COMPILED:
            _made_kernels[name] = got
    return got


def _kernels():
    """Every entry point (copy_reads, apply, overlapping, compact, build), loaded."""
    return tuple(_kernel(name) for name in vk._ENTRIES)


def _bounds(rect: Rect) -> np.ndarray:
    return np.array(rect.lo + rect.hi, np.int64)


class ValidPieces:
    """Disjoint (rect, holders) pieces in insertion order, as arrays (validkernels.py): the
    RectIndex API coherence's readers use -- overlapping, iteration, len, exact_value, add --
    with holders as tuples (read only: changes go through PieceState). Its index
    (validindex.py): `gi`, the grid (`cells`, `ent`), holder rows (`mrow`, `mwhere`) for
    `ndev` devices."""
    __slots__ = ("nd", "box", "hold", "pool", "meta", "_first", "queue", "gi", "cells", "ent",
                 "mrow", "mwhere", "ndev", "made")

    def __init__(self, ndev: int = 0):
        self.nd = -1
        self.box = self.hold = self.pool = self.meta = self.gi = self.mrow = None
        self.cells, self.ent = _NO_CELLS, _NO_ENT
        self.mwhere = np.empty((0, 1), np.int32)
        self.ndev = ndev
        # position -> (position, Rect, holders) made for overlapping's callers: a position's
        # rect and holders never change (a change kills it and appends others) until a
        # compaction renumbers the positions (room: then forgotten)
        self.made: dict = {}
        self._first: Rect | None = None
        # PieceState's changes (rect, SET_ONLY or ADD_HOLDER, devices) not applied yet:
        # applied in order, in one compiled call, before the pieces are next read (every
        # method here flushes first)
        self.queue: list = []

    def flush(self) -> None:
        """Apply the queued changes (validkernels.apply)."""
        queue = self.queue
        self.queue = []
        ops = np.array([r.lo + r.hi + (kind, len(ds)) for r, kind, ds in queue], np.int64)
        devices = np.array([d for _, _, ds in queue for d in ds], np.int64)
        kernel = _kernel("apply")
        done = 0
        gi = self.gi
        while True:
            done = kernel(self.box, self.hold, self.pool, self.meta, gi, self.cells, self.ent,
                          self.mrow, self.mwhere, ops, devices, done)
            if done == len(queue):
                break
            why, pos, pool, ent = gi[[vi.G_STOP, vi.G_NEED_POS, vi.G_NEED_POOL,
                                      vi.G_NEED_ENT]].tolist()
            self._serve(why, pos, pool, ent)
        if gi[vi.G_ROWS_WANTED]:
            self._more_rows()

    def _serve(self, why: int, pos: int, pool: int, ent: int) -> None:
        """What a kernel stopped for: room (positions, pool entries, grid entries: totals,
        free grid entries), or (vi.STOP_WANT) a compaction or the grid (re)built."""
        npos, alive, used = self.meta.tolist()
        if why == vi.STOP_WANT:
            if npos > 2 * alive + 64:
                self.room(0, 0)
            else:
                self._reindex()
        else:
            self.room(pos - npos, pool - used, ent)

    def _reindex(self) -> None:
        """The grid built over the live pieces where they are more than GRID_AT (or it was on
        and they are more than half that), else none."""
        gi = self.gi
        alive, at = int(self.meta[vk.M_NALIVE]), int(gi[vi.G_AT])
        if self.nd > 0 and at >= 0 and (alive > at or (gi[vi.G_ON] and 2 * alive > at)):
            self.cells, self.ent = _kernel("build")(self.box, self.hold, self.meta, gi)
        else:
            gi[vi.G_ON] = 0
            self.cells, self.ent = _NO_CELLS, _NO_ENT

    def _devices(self, n: int) -> None:
        """Holder rows for `n` devices (ids 0..n-1); the rows made so far dropped."""
        if n <= self.ndev and self.mwhere.shape[1] == self.ndev + 1:
            return
        self.ndev = n = max(n, self.ndev)
        self.mwhere = np.empty((0, n + 1), np.int32)
        self.mrow[:] = -1
        gi = self.gi
        gi[vi.G_NROWS] = gi[vi.G_ROWS_WANTED] = 0
        gi[vi.G_ROW_AT] = max(ROW_AT, n // ROW_RATIO) if ROW_AT > 0 and n else 0

    def _more_rows(self) -> None:
        """Room for the holder rows a kernel wanted (up to ~2 int32 per pool entry)."""
        gi = self.gi
        used, wanted = int(gi[vi.G_NROWS]), int(gi[vi.G_ROWS_WANTED])
        gi[vi.G_ROWS_WANTED] = 0
        rows = self.mwhere
        cols = rows.shape[1]
        cap = min(max(4, 2 * used + wanted), (2 * self.pool.shape[0] + 65536) // cols)
        if cap > rows.shape[0]:
            grown = np.empty((cap, cols), np.int32)
            grown[:used] = rows[:used]
            self.mwhere = grown

    def _check(self, rect: Rect) -> None:
        if len(rect.lo) != self.nd:
            if self._first is None:
                self._first = rect
                self.nd = nd = len(rect.lo)
                self.box = np.empty((_MIN_ROOM, 2 * nd), np.int64)
                self.hold = np.zeros((_MIN_ROOM, 2), np.int64)
                self.pool = np.empty(4 * _MIN_ROOM, np.int64)
                self.meta = np.zeros(3, np.int64)
                self.gi = gi = np.zeros(vi.gi_size(nd), np.int64)
                gi[vi.G_AT] = GRID_AT
                gi[vi.G_FREE] = -1
                self.mrow = np.full(self.pool.shape[0], -1, np.int64)
                n, self.ndev = self.ndev, 0
                self._devices(n)
            else:
                self._first._check_same_ndim(rect)    # raises the error naming both

    def __len__(self) -> int:
        if self.queue:
            self.flush()
        return 0 if self.meta is None else int(self.meta[vk.M_NALIVE])

    def __iter__(self):
        if self.queue:
            self.flush()
        if self.meta is None:
            return
        n, nd = int(self.meta[vk.M_NPOS]), self.nd
        pool = self.pool[:int(self.meta[vk.M_POOL])].tolist()
        for p, (row, (s, c)) in enumerate(zip(self.box[:n].tolist(),
                                              self.hold[:n].tolist())):
            if c:
                yield p, Rect(tuple(row[:nd]), tuple(row[nd:])), tuple(pool[s:s + c])

    def overlapping(self, rect: Rect) -> list[tuple[int, Rect, tuple]]:
        """(position, rect, holders) of the pieces overlapping `rect`, in insertion order."""
        if self.queue:
            self.flush()
        if self.meta is None or rect.empty:
            return []
        self._check(rect)
        found = _kernel("overlapping")(self.box, self.hold, self.meta, self.gi, self.cells,
                                       self.ent, _bounds(rect))
        if not found.shape[0]:
            return []
        made = self.made
        ps = found.tolist()
        got = [made.get(p) for p in ps]
        if None in got:                 # (made for Python once per position: self.made)
            nd, pool = self.nd, self.pool
            for k, (p, row, (s, n)) in enumerate(zip(ps, self.box[found].tolist(),
                                                     self.hold[found].tolist())):
                if got[k] is None:
                    got[k] = made[p] = (p, Rect(tuple(row[:nd]), tuple(row[nd:])),
                                        tuple(pool[s:s + n].tolist()))
        return got

    def exact_value(self, rect: Rect):
        """The holders of the piece equal to `rect`, or None."""
        for _, r, holders in self.overlapping(rect):
            return holders if r == rect else None
        return None

    def add(self, rect: Rect, devices: Iterable[int]) -> None:
        """Append a piece (initial data; coherence's tests)."""
        if self.queue:
            self.flush()
        self._check(rect)
        devices = list(devices)
        self.room(1, len(devices))
        meta = self.meta
        n, s = int(meta[vk.M_NPOS]), int(meta[vk.M_POOL])
        self.box[n] = rect.lo + rect.hi
        self.pool[s:s + len(devices)] = devices
        self.hold[n] = (s, len(devices))
        meta[vk.M_NPOS] = n + 1
        meta[vk.M_NALIVE] += 1
        meta[vk.M_POOL] = s + len(devices)
        if self.gi[vi.G_ON]:            # (not entered: the grid made again when wanted)
            self.gi[vi.G_ON] = 0
            self.cells, self.ent = _NO_CELLS, _NO_ENT

    def room(self, positions: int, pool: int, entries: int = 0) -> bool:
        """Room for `positions` more positions, `pool` more holder entries and `entries` free
        grid entries: the live pieces compacted (order kept) where dead ones take half the
        positions, the arrays doubled past what is needed; then the grid made again over the
        new positions (or none: _reindex) and the holder rows dropped. Whether it moved the
        pieces (positions change). (Never with writes queued: its callers flushed them.)"""
        meta = self.meta
        npos, alive, used = meta.tolist()
        cap, pcap = self.box.shape[0], self.pool.shape[0]
        moved = not (npos + positions <= cap and used + pool <= pcap and
                     npos <= 2 * alive + 64)
        gi = self.gi
        if moved:
            ncap = max(cap, 2 * (alive + positions) + _MIN_ROOM)
            npcap = max(pcap, 2 * (used + pool) + 4 * _MIN_ROOM)
            box = np.empty((ncap, self.box.shape[1]), np.int64)
            hold = np.zeros((ncap, 2), np.int64)
            newpool = np.empty(npcap, np.int64)
            _kernel("compact")(self.box, self.hold, self.pool, meta, box, hold, newpool)
            self.box, self.hold, self.pool = box, hold, newpool
            self.made = {}
            self.mrow = np.full(npcap, -1, np.int64)
            gi[vi.G_NROWS] = 0
            if gi[vi.G_ON] or gi[vi.G_AT] >= 0 and alive > gi[vi.G_AT]:
                self._reindex()
        if entries and gi[vi.G_ON]:
            ent = self.ent
            top = int(gi[vi.G_EUSED])
            if entries > ent.shape[0] - top + int(gi[vi.G_NFREE]):
                grown = np.empty((2 * (top + entries) + 4 * vi.MAXC, 2), np.int64)
                grown[:top] = ent[:top]
                self.ent = grown
        return moved

    def copy_reads(self, reads: list, sent: np.ndarray, ranks: np.ndarray, log: bool,
                   forced: list | None):
        """validkernels.copy_reads of `reads` [(device, rect)], growing what it asks for.
        Returns (copies [(read index, source, Rect)], status, read index it stopped at,
        covered elements of that read, choices logged [(holders, device, elements, src)],
        forced choices taken)."""
        if self.queue:
            self.flush()
        nd = self.nd
        rows = np.array([(d,) + r.lo + r.hi for d, r in reads], np.int64)
        ctl = _CTL
        ctl[:] = 0
        ctl[vk.C_LOG] = log
        out = _OUT.get(nd)
        if out is None or out.shape[0] < len(reads):
            out = _OUT[nd] = np.empty((max(64, 2 * len(reads)), 3 + 2 * nd), np.int64)
        logs = np.empty((8, 5), np.int64) if log else _NO_LOG
        logh = np.empty(32, np.int64) if log else _NONE
        if forced:
            order = forced[::-1]            # (popped from the end)
            fh = [h for holders, *_ in order for h in holders]
            offs = np.cumsum([0] + [len(f[0]) for f in order])
            farr = np.array([(f[1], f[2], f[3], offs[k], len(f[0]))
                             for k, f in enumerate(order)], np.int64)
            fharr = np.array(fh, np.int64)
            ctl[vk.C_FN] = len(order)
        else:
            farr, fharr = _NO_LOG, _NONE
        kernel = _kernel("copy_reads")
        self.room(_MIN_ROOM, 4 * _MIN_ROOM)
        if len(ranks) > self.ndev:
            self._devices(len(ranks))
        while True:
            kernel(self.box, self.hold, self.pool, self.meta, self.gi, self.cells, self.ent,
                   self.mrow, self.mwhere, sent, ranks, rows, ctl, out, logs, logh, farr,
                   fharr)
            status = ctl[vk.C_STATUS]
            if status == vk.WANT:
                ctl[vk.C_STATUS] = vk.DONE
                self._serve(vi.STOP_WANT, 0, 0, 0)
                continue
            if status != vk.NEED:
                break
            ctl[vk.C_STATUS] = vk.DONE
            need = ctl.tolist()
            self.room(need[vk.C_NEED_POS] - int(self.meta[vk.M_NPOS]),
                      need[vk.C_NEED_POOL] - int(self.meta[vk.M_POOL]), need[vk.C_NEED_ENT])
            if need[vk.C_NEED_OUT] > out.shape[0]:
                out = _OUT[nd] = _grown(out, need[vk.C_NEED_OUT], need[vk.C_NOUT])
            if need[vk.C_NEED_LOG] > logs.shape[0]:
                logs = _grown(logs, need[vk.C_NEED_LOG], need[vk.C_NLOG])
            if need[vk.C_NEED_LOGH] > logh.shape[0]:
                logh = _grown(logh, need[vk.C_NEED_LOGH], need[vk.C_NLOGH])
        if self.gi[vi.G_ROWS_WANTED]:
            self._more_rows()
        c = ctl.tolist()
        copies = []
        mid = 3 + nd
        for row in out[:c[vk.C_NOUT]].tolist():
            j = row[0]
            rect = reads[j][1]
            lo, hi = tuple(row[3:mid]), tuple(row[mid:])
            if lo != rect.lo or hi != rect.hi:
                rect = _made(lo, hi, row[2])
            copies.append((j, row[1], rect))
        choices = []
        if log:
            hs = logh[:c[vk.C_NLOGH]].tolist()
            for device, elements, src, o, n in logs[:c[vk.C_NLOG]].tolist():
                choices.append((tuple(hs[o:o + n]), device, elements, src))
        return copies, c[vk.C_STATUS], c[vk.C_NEXT], c[vk.C_COVERED], choices, c[vk.C_FPTR]


def _grown(a: np.ndarray, need: int, used: int) -> np.ndarray:
    b = np.empty((2 * need,) + a.shape[1:], np.int64)
    b[:used] = a[:used]
    return b


class PieceState:
    """coherence.RegionState over ValidPieces: the same methods, the same answers."""
    __slots__ = ("region", "valid", "pending", "held")

    def __init__(self, region: Region, num_devices: int = 0):
        self.region = region
        self.valid = ValidPieces(num_devices)
        self.pending = PendingSums()
        self.held: set = set()      # (device, rect) known held (RegionState.held)

    def valid_meets(self, rect: Rect) -> bool:
        """Whether a valid piece overlaps `rect`."""
        valid = self.valid
        if valid.queue:
            valid.flush()
        if valid.meta is None or rect.empty or not valid.meta[vk.M_NALIVE]:
            return False
        valid._check(rect)
        return _kernel("overlapping")(valid.box, valid.hold, valid.meta, valid.gi, valid.cells,
                                      valid.ent, _bounds(rect)).shape[0] > 0

    def add_holder(self, rect: Rect, device: int) -> None:
        """Record that `device` now also holds the current value of `rect` (queued)."""
        valid = self.valid
        if len(rect.lo) != valid.nd:
            valid._check(rect)
        valid.queue.append((rect, vk.ADD_HOLDER, (device,)))

    def set_only_holder(self, rect: Rect, devices: Iterable[int]) -> None:
        """`devices` alone hold the current value of `rect` (queued: ValidPieces.flush)."""
        self.held.clear()
        valid = self.valid
        if len(rect.lo) != valid.nd:
            valid._check(rect)
        valid.queue.append((rect, vk.SET_ONLY,
                            devices if type(devices) is tuple else tuple(devices)))

    def set_only_holder_of(self, rect: Rect, pieces: list[Rect], devices) -> None:
        """set_only_holder(piece, devices) for each of the disjoint `pieces` of `rect`."""
        devices = tuple(devices)
        for piece in pieces:
            self.set_only_holder(piece, devices)

    def retire_pending(self, rect: Rect, found=None) -> None:
        pending = self.pending
        pending.retire(rect, pending.overlapping(rect) if found is None else found)


class SentCounts:
    """RegionPlanner.sent as an int64 array per device, -1 where nothing was ever counted:
    the dict API its readers use (get, [], pop, update, items, ==) over what the kernel
    counts in place. Made on first use (a planner that copies nothing holds none)."""
    __slots__ = ("_n", "_a")

    def __init__(self, num_devices: int):
        self._n = num_devices
        self._a = None

    @property
    def array(self) -> np.ndarray:
        a = self._a
        if a is None:
            a = self._a = np.full(self._n, -1, np.int64)
        return a

    def get(self, device: int, default=None):
        a = self._a
        v = -1 if a is None else int(a[device])
        return default if v < 0 else v

    def __getitem__(self, device: int) -> int:
        v = self.get(device)
        if v is None:
            raise KeyError(device)
        return v

    def __setitem__(self, device: int, value: int) -> None:
        self.array[device] = value

    def __contains__(self, device: int) -> bool:
        return self.get(device) is not None

    def pop(self, device: int, default=None):
        v = self.get(device)
        if v is None:
            return default
        self._a[device] = -1
        return v

    def update(self, other) -> None:
        for k, v in dict(other).items():
            self[k] = v

    def items(self):
        a = self._a
        if a is None:
            return []
        return [(d, v) for d, v in enumerate(a.tolist()) if v >= 0]

    def __iter__(self):
        return iter([d for d, _ in self.items()])

    def __len__(self) -> int:
        return len(self.items())

    def __eq__(self, other) -> bool:
        return dict(self.items()) == dict(other.items() if hasattr(other, "items") else other)

    def __repr__(self) -> str:
        return f"SentCounts({dict(self.items())})"


def copy_in_all(rp, launch, reads, out: list) -> None:
    """RegionPlanner._copy_in of each of `reads` [(color, device, rect)] in order, for the
    planner `rp` (COMPILED_READS), the walks in one compiled call (validkernels.copy_reads):
    the same copies, valid pieces and counts."""
    held = rp.state.held
    todo, colors = [], []
    for color, device, rect in reads:
        key = (device, rect)
        if key in held:             # read before, nothing written since: all held
            continue
        held.add(key)               # (what the walk leaves, unless it raises)
        todo.append(key)
        colors.append(color)
    if not todo:
        return
    valid = rp.state.valid
    nd = valid.nd
    for _, rect in todo:
        if len(rect.lo) != nd:
            valid._check(rect)
            nd = valid.nd
    ranks = rp._rank_array
    if ranks is None:
        ranks = rp._rank_array = np.array(rp._ranks, np.int64)
    forced = rp._forced_choices()
    copies, status, stop, covered, choices, taken = valid.copy_reads(
        todo, rp.sent.array, ranks, rp._logs_choices, forced)
    if taken:
        del forced[len(forced) - taken:]
    if choices:
        rp._logged(choices)
    name, copy = launch.name, rp._copy
    for j, src, rect in copies:
        copy(name, rect, src, todo[j][0], out)
    if status == vk.UNCOVERED:
        device, rect = todo[stop]
        raise PlanError(rp._unwritten(launch, colors[stop], device, rect, covered))
    if status == vk.FORCED_MISMATCH:
        raise AssertionError("a slab replayed differently from its class")
