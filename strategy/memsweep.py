"""The memory peak of a SimulationSession's buffers (strategy/delta_memory.py) in two compiled
passes around one numpy sort: taskrt.liveness's model (peak_bytes_of_users) fused with the
choice of which used buffers are temporaries, over the session's arrays, with numba like
strategy/listsched.py.

Per use (the uses in node order, counted per node, as the session's joined arrays hold
them: no per-use node array is made): a buffer of a kept region or under the small-buffer
size persists (a staging buffer in use then adds its bytes to its device's persistent
ones, once), except saved state, which is always a temporary (what a buffer is, read at
its first use in a sweep and kept as flag bits); a temporary lives from its users'
earliest start to their latest end (_uses). Then the allocation events,
sorted by time (each time's bits with the event's index in its lowest bits, sorted as int64
values by numpy, the order finished by an insertion pass over the events whose times share
their leading bits: numpy's stable argsort exactly, in half its time; _pack, _unpack) and
swept in that order, all devices at once (_peaks): per device, at one time releases come first, then
allocations, then the releases of buffers whose last user takes no time
(liveness.peak_bytes_of_users). The peak of a device is reached right after a time's
allocations (every other event lowers the live bytes, and each device's first event is an
allocation: a buffer allocated and released at one time is released late), so a sweep
needs only, per (device, time), the sums of its releases, its allocations and its late
releases: the order of events within one kind and time, which the sort may not keep,
cannot change it. The result is the reference's exactly (integer
sums; tests/strategy/test_delta_memory.py compares them on random cases). A sweep looks at
the buffers its uses name only (their working entries live in a Scratch kept between
sweeps), not at every id of the table, which holds several graphs' buffers.
"""
from __future__ import annotations

import numpy as np

from taskrt.numbastart import loading_kernels

_SIGNATURE = ("i8(i8[::1], i8[::1], f8[::1], f8[::1], i8[::1], i8[::1], i8[::1], b1[::1], "
              "b1[::1], b1[::1], i8, i8[::1], i8[::1], i8[::1], i8, f8[::1], f8[::1], u1[::1], "
              "i8[::1], f8[::1], i8[::1])")
_SIGNATURE_PEAKS = "void(f8[::1], i8[::1], i8[::1], i8[::1], u1[::1], i8[::1], i8[::1], b1[::1])"
_SIGNATURE_PACK = "void(i8[::1], i8, i8[::1])"
_SIGNATURE_UNPACK = "void(f8[::1], i8[::1], i8, i8[::1])"
# The events ordered by packed keys sorted as values (_pack, _unpack); False: by numpy's
# stable argsort of the times, as before (kept as the tests' oracle)
PACKED_SORT = True
# Bits of Scratch.flags: set by the uses (_COUNTED, _USED, _LATE), or once per sweep at a
# buffer's first use from what it is (_ADDS: kept and staging, its bytes persist once;
# _SKIP: kept and not saved state, no temporary)
_COUNTED, _USED, _LATE, _ADDS, _SKIP = 1, 2, 4, 8, 16
_KIND_BITS = _COUNTED | _ADDS | _SKIP


def _uses(users_buf, counts, start, end, sizes, dev, region, kept_mask, staging, state,
          threshold, per_bytes, per_count, stamp, now, born, dies, flags, touched, times,
          bufs):
    """Adds the staging buffers in use that persist to per_bytes / per_count (per device);
    writes the temporaries' allocation and release events (times[j], bufs[j]: b allocated,
    -1 - b released; the allocations first) and returns how many. Node i has counts[i] of
    the uses users_buf, in node order. stamp, born, dies, flags: a Scratch's arrays (a
    buffer's entries are set up when its stamp is not `now`, with what it is as flag bits:
    only used buffers are looked at, however many the table holds, and each once). touched
    (the buffers used, in order of first use), times and bufs: a Scratch's working arrays,
    with room for 1, 2 and 2 per use."""
    nt = 0
    k = 0
    for i in range(counts.shape[0]):
        si = start[i]
        ei = end[i]
        for _ in range(counts[i]):
            b = users_buf[k]
            k += 1
            if stamp[b] != now:
                stamp[b] = now
                born[b] = np.inf
                dies[b] = -np.inf
                f = 0
                if kept_mask[region[b]] or sizes[b] < threshold:
                    if staging[b]:
                        f |= _ADDS
                    if not state[b]:
                        f |= _SKIP
                flags[b] = f
                touched[nt] = b
                nt += 1
            f = flags[b]
            if f & _ADDS and not f & _COUNTED:
                f |= _COUNTED
                flags[b] = f
                per_bytes[dev[b]] += sizes[b]
                per_count[dev[b]] += 1
            if f & _SKIP:
                continue
            if si < born[b]:
                born[b] = si
            # _LATE: a user ending at the latest end so far takes no time (a last user that
            # takes no time, once the latest end is final)
            if ei > dies[b]:
                dies[b] = ei
                flags[b] = (f & _KIND_BITS) | _USED | (_LATE if si == ei else 0)
            elif ei == dies[b] and si == ei:
                flags[b] = f | _USED | _LATE
            else:
                flags[b] = f | _USED
    # The allocations, then the releases, each in order of first use: two runs of mostly
    # ascending times (nodes come roughly in time order), which the sort merges.
    m = 0
    for q in range(nt):
        if flags[touched[q]] & _USED:
            m += 1
    j = 0
    for q in range(nt):
        b = touched[q]
        if flags[b] & _USED:
            times[j], bufs[j] = born[b], b
            times[m + j], bufs[m + j] = dies[b], -1 - b
            j += 1
    return 2 * m


def _pack(bits, shift, keys):
    """keys[j]: event j's time as its bits (`bits`: times not negative, so their bits
    ascend with them; -0.0's, the only negative ones, as 0.0's) with the lowest `shift`
    bits replaced by j (j < 2**shift): sorted as values they put the events in order of
    their times' leading bits, then of j (_unpack finishes the order)."""
    for j in range(bits.shape[0]):
        b = bits[j]
        if b < 0:
            b = 0
        keys[j] = ((b >> shift) << shift) | j


def _unpack(times, keys, shift, order):
    """order: the events of the sorted keys (_pack), then sorted by their exact times by
    insertion (only events whose times share their leading bits can be out of order, and
    equal times are not moved): numpy's stable argsort of the times, for times not
    negative (-0.0 with the zeros, in its place among them)."""
    mask = (np.int64(1) << shift) - 1
    for j in range(keys.shape[0]):
        e = keys[j] & mask
        t = times[e]
        q = j
        while q > 0 and times[order[q - 1]] > t:
            order[q] = order[q - 1]
            q -= 1
        order[q] = e


def _peaks(times, bufs, order, sizes, flags, dev, peak, has_temp):
    """Sets peak[d] to device d's most temporary bytes live at once and has_temp[d] where
    device d has a temporary with users (both passed in as zeros), from the events (times,
    bufs) taken in `order` (by time; any order among equal times: see the module doc), in
    one pass: per time, each device's sums of releases, allocations and late releases, then
    for each device with events at that time its live bytes and peak (no grouping by device
    first: a counting sort by device was a second pass of scattered writes and reads)."""
    num_dev = peak.shape[0]
    n = order.shape[0]
    live = np.zeros(num_dev, dtype=np.int64)
    released = np.zeros(num_dev, dtype=np.int64)
    allocated = np.zeros(num_dev, dtype=np.int64)
    late_released = np.zeros(num_dev, dtype=np.int64)
    allocs = np.zeros(num_dev, dtype=np.int64)
    at = np.zeros(num_dev, dtype=np.bool_)       # the device has events at this time
    seen = np.empty(num_dev, dtype=np.int64)     # those devices, in order of first event
    j = 0
    while j < n:
        tj = times[order[j]]
        m = 0
        while j < n:
            e = order[j]
            if times[e] != tj:
                break
            b = bufs[e]
            if b >= 0:
                d = dev[b]
                allocated[d] += sizes[b]
                allocs[d] += 1
            else:
                b = -1 - b
                d = dev[b]
                if flags[b] & _LATE:
                    late_released[d] += sizes[b]
                else:
                    released[d] += sizes[b]
            if not at[d]:
                at[d] = True
                seen[m] = d
                m += 1
            j += 1
        for q in range(m):
            d = seen[q]
            lv = live[d] - released[d] + allocated[d]
            if allocs[d] and lv > peak[d]:
                peak[d] = lv
            live[d] = lv - late_released[d]
            has_temp[d] = True
            at[d] = False
            released[d] = 0
            allocated[d] = 0
            late_released[d] = 0
            allocs[d] = 0


class Scratch:
    """Per buffer id, the sweep's working entries (first use, last use, flags), kept from
    one sweep to the next so that a sweep sets up only the buffers it uses: a session's
    table holds several graphs' buffers (strategy/delta.py starts it again only past 4 per
    node), and filling arrays over all of them was most of a sweep. Also the per-use
    working arrays (`uses`): fresh megabyte arrays per sweep cost their page faults."""
    __slots__ = ("stamp", "now", "born", "dies", "flags", "touched", "times", "bufs", "keys",
                 "order")

    def __init__(self):
        self.now = 0
        self._grow(0)
        self.touched, self.times = np.empty(0, dtype=np.int64), np.empty(0)
        self.bufs = self.keys = self.order = np.empty(0, dtype=np.int64)

    def uses(self, m: int) -> tuple:
        """(touched, times, bufs) with room for a sweep over m uses (and keys and order,
        for _pack and _unpack, with room for 2 per use)."""
        if len(self.touched) < m:
            m = max(m, 2 * len(self.touched))
            self.touched = np.empty(m, dtype=np.int64)
            self.times, self.bufs = np.empty(2 * m), np.empty(2 * m, dtype=np.int64)
            self.keys, self.order = np.empty(2 * m, dtype=np.int64), np.empty(2 * m, dtype=np.int64)
        return self.touched, self.times, self.bufs

    def _grow(self, n: int) -> None:
        # Entries are set up by the sweep that stamps them: new arrays need no copy (every
        # stamp so far is below the next sweep's).
        self.stamp = np.zeros(n, dtype=np.int64)         # 0: never (sweeps count from 1)
        self.born, self.dies = np.empty(n), np.empty(n)
        self.flags = np.zeros(n, dtype=np.uint8)

    def next(self, num_buffers: int) -> int:
        """The stamp of a new sweep over `num_buffers` buffer ids (arrays grown to fit)."""
        if len(self.stamp) < num_buffers:
            self._grow(max(num_buffers, 2 * len(self.stamp)))
        self.now += 1
        return self.now


_compiled = None


def _kernels() -> tuple:
    """The compiled (_uses, _peaks, _pack, _unpack) (made on first use, cached next to
    this file), or the Python functions without numba."""
    global _compiled
    if _compiled is None:
        try:
            from numba import njit
        except ImportError:                   # pragma: no cover - numba is a dependency
            _compiled = (_uses, _peaks, _pack, _unpack)
        else:
            with loading_kernels():               # (numbastart.py)
                _compiled = (njit(_SIGNATURE, cache=True, nogil=True)(_uses),
                             njit(_SIGNATURE_PEAKS, cache=True, nogil=True)(_peaks),
                             njit(_SIGNATURE_PACK, cache=True, nogil=True)(_pack),
                             njit(_SIGNATURE_UNPACK, cache=True, nogil=True)(_unpack))
    return _compiled


def sweep_peak(users_buf, users_node, start, end, sizes, dev, region, kept_mask, staging,
               state, threshold: int, per_bytes, per_count,
               scratch: Scratch | None = None, counts=None) -> dict[int, int]:
    """Peak bytes per device: per_bytes (a device listed where per_count > 0, ascending)
    plus the staging buffers in use that persist, plus the most temporaries live at once
    (devices with temporaries but no persistent buffers after those, ascending): what
    BufferTable.peak computed with numpy and taskrt.liveness.peak_bytes_of_users.
    Node users_node[k] uses buffer users_buf[k]; or, users_node None, node i has counts[i]
    of the uses, in node order. per_bytes and per_count are updated in place (pass copies).
    `scratch`: the working entries kept between sweeps of one table (a fresh one when
    None)."""
    c = np.ascontiguousarray
    i8 = np.int64
    if users_node is not None:
        # In node order (the peak does not depend on the order of the uses: a buffer's
        # first and last use times are a minimum and a maximum, its flags set by any use).
        users_node = np.asarray(users_node, dtype=i8)
        if len(users_node) > 1 and (users_node[1:] < users_node[:-1]).any():
            order = np.argsort(users_node, kind="stable")
            users_buf, users_node = np.asarray(users_buf)[order], users_node[order]
        counts = np.bincount(users_node, minlength=len(start))
    num_dev = len(per_bytes)
    scratch = scratch or Scratch()
    now = scratch.next(len(sizes))
    peak = np.zeros(num_dev, dtype=np.int64)
    has_temp = np.zeros(num_dev, dtype=bool)
    uses, peaks, pack, unpack = _kernels()
    sizes, dev = c(sizes, dtype=i8), c(dev, dtype=i8)
    touched, times, bufs = scratch.uses(len(users_buf))
    n = uses(c(users_buf, dtype=i8), c(counts, dtype=i8), c(start, dtype=np.float64),
             c(end, dtype=np.float64), sizes, dev, c(region, dtype=i8),
             c(kept_mask, dtype=bool), c(staging, dtype=bool), c(state, dtype=bool),
             int(threshold), per_bytes, per_count, scratch.stamp, now, scratch.born,
             scratch.dies, scratch.flags, touched, times, bufs)
    times, bufs = times[:n], bufs[:n]
    # numpy's sort (vectorised) rather than numba's: the sort was most of a sweep. Stable
    # (timsort) rather than the default introsort: the events come as two runs in node
    # order (_uses), so their times are long ascending runs, which timsort merges; 2x
    # faster at Inception-v3 @16 (0.75 vs 1.54 ms a sweep of ~23k events, docs/design.md).
    # Times that are not negative sort as their bits (int64 compares: 0.54 -> 0.33 ms
    # there, with the two runs; -0.0 first, with the zeros it equals). Any order of one
    # time's events gives the same peak (module docstring).
    # Faster still (0.7 vs 1.4 ms at Inception-v3 @16's 54k events): the times' bits and
    # the event's index packed in one int64, sorted as values, the order finished exactly
    # (_pack, _unpack); the same order as the stable argsort.
    if PACKED_SORT and n and times.min() >= 0:
        shift = max(1, (n - 1).bit_length())
        keys, order = scratch.keys[:n], scratch.order[:n]
        pack(times.view(np.int64), shift, keys)
        keys.sort()
        unpack(times, keys, shift, order)
    else:
        keys = times.view(np.int64) if n and times.min() >= 0 else times
        order = np.argsort(keys, kind="stable")
    peaks(times, bufs, order, sizes, scratch.flags, dev, peak, has_temp)
    out = {int(d): int(per_bytes[d]) for d in np.flatnonzero(per_count)}
    for d in np.flatnonzero(has_temp).tolist():
        out[d] = out.get(d, 0) + int(peak[d])
    return out


def liveness_peak(live, start, end) -> dict[int, int]:
    """live.peak(start, end) (a taskrt.liveness.Liveness: peak_bytes_of_users over its
    temporaries) by this module's compiled passes, for the simulator: each of live's
    buffers is a temporary (no region kept, no small-buffer threshold, no staging buffer
    persisting), so sweep_peak's model is peak_bytes_of_users'; live.persistent's bytes come
    first, then each device's temporaries' peak, in the same order (the same dict).
    GPT-3 2.7B at 1,024 H100s under Megatron t=8 has 6.7M uses of 1.7M temporaries: numpy's
    passes took 0.7-0.95 s of process CPU, these 0.3-0.6 (docs/design.md "Simulator speed")."""
    out = dict(live.persistent)
    if not len(live.use_buf):
        return out
    sizes, dev = live.nbytes_array, live.device_array
    n, num_dev = len(sizes), int(dev.max()) + 1
    none = np.zeros(n, dtype=bool)
    got = sweep_peak(live.use_buf, live.use_node, start, end, sizes, dev,
                     np.zeros(n, dtype=np.int64), np.zeros(1, dtype=bool), none, none, 0,
                     np.zeros(num_dev, dtype=np.int64), np.zeros(num_dev, dtype=np.int64))
    for d, p in got.items():
        out[d] = out.get(d, 0) + p
    return out
