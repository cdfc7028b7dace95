"""The memory peak of a SimulationSession's buffers (strategy/delta_memory.py) in one compiled
pass: taskrt.liveness's model (peak_bytes_of_users) fused with the choice of which used
buffers are temporaries, over the session's arrays, with numba like strategy/listsched.py.

Per use (node users_node[k] uses buffer users_buf[k]): a buffer of a kept region or under
the small-buffer size persists (a staging buffer in use then adds its bytes to its device's
persistent ones, once), except saved state, which is always a temporary; a temporary lives
from its users' earliest start to their latest end. Then the allocation events, sorted by
(device, time): at one time releases come first, then allocations, then the releases of
buffers whose last user takes no time (liveness.peak_bytes_of_users). The peak of a device
is reached right after a time's allocations (every other event lowers the live bytes, and
each device's first event is an allocation: a buffer allocated and released at one time is
released late), so a sweep needs only, per (device, time), the sums of its releases, its
allocations and its late releases: the order of events within one kind and time, which
the sort may not keep, cannot change it. The result is the reference's exactly (integer
sums; tests/strategy/test_delta_memory.py compares them on random cases).
"""
from __future__ import annotations

import numpy as np

from .numbastart import blas_probe_skipped

_SIGNATURE = ("void(i8[::1], i8[::1], f8[::1], f8[::1], i8[::1], i8[::1], i8[::1], b1[::1], "
              "b1[::1], b1[::1], i8, i8[::1], i8[::1], i8[::1], b1[::1])")


def _sweep(users_buf, users_node, start, end, sizes, dev, region, kept_mask, staging, state,
           threshold, per_bytes, per_count, peak, has_temp):
    """Adds the staging buffers in use that persist to per_bytes / per_count (per device);
    sets peak[d] to device d's most temporary bytes live at once and has_temp[d] where
    device d has a temporary with users."""
    nb = sizes.shape[0]
    born = np.full(nb, np.inf)
    dies = np.full(nb, -np.inf)
    counted = np.zeros(nb, dtype=np.bool_)
    used = np.zeros(nb, dtype=np.bool_)
    late = np.zeros(nb, dtype=np.bool_)
    m = users_buf.shape[0]
    for k in range(m):
        b = users_buf[k]
        keep = kept_mask[region[b]] or sizes[b] < threshold
        if keep and staging[b] and not counted[b]:
            counted[b] = True
            per_bytes[dev[b]] += sizes[b]
            per_count[dev[b]] += 1
        if keep and not state[b]:
            continue
        i = users_node[k]
        if start[i] < born[b]:
            born[b] = start[i]
        if end[i] > dies[b]:
            dies[b] = end[i]
        used[b] = True
    for k in range(m):                       # a last user that takes no time
        b = users_buf[k]
        if used[b]:
            i = users_node[k]
            if end[i] == dies[b] and start[i] == end[i]:
                late[b] = True
    t = 0
    for b in range(nb):
        if used[b]:
            t += 1
    # Events: 2 per temporary, sorted by time, then (stably) by device.
    times = np.empty(2 * t)
    bufs = np.empty(2 * t, dtype=np.int64)
    j = 0
    for b in range(nb):
        if used[b]:
            times[j], bufs[j] = born[b], b
            times[j + 1], bufs[j + 1] = dies[b], -1 - b
            j += 2
    by_time = np.argsort(times, kind="mergesort")
    num_dev = peak.shape[0]
    dev_ptr = np.zeros(num_dev + 1, dtype=np.int64)
    for j in range(2 * t):
        b = bufs[j]
        dev_ptr[dev[b if b >= 0 else -1 - b] + 1] += 1
    for d in range(num_dev):
        dev_ptr[d + 1] += dev_ptr[d]
    fill = dev_ptr[:num_dev].copy()
    order = np.empty(2 * t, dtype=np.int64)
    for j in by_time:
        b = bufs[j]
        d = dev[b if b >= 0 else -1 - b]
        order[fill[d]] = j
        fill[d] += 1
    for d in range(num_dev):
        live = 0
        best = 0
        any_event = False      # the device has temporaries (its peak is listed, maybe 0)
        j = dev_ptr[d]
        while j < dev_ptr[d + 1]:
            tj = times[order[j]]
            released, allocated, late_released, allocs = 0, 0, 0, 0
            while j < dev_ptr[d + 1] and times[order[j]] == tj:
                b = bufs[order[j]]
                if b >= 0:
                    allocated += sizes[b]
                    allocs += 1
                elif late[-1 - b]:
                    late_released += sizes[-1 - b]
                else:
                    released += sizes[-1 - b]
                j += 1
            live -= released
            live += allocated
            if allocs and live > best:
                best = live
            any_event = True
            live -= late_released
        has_temp[d] = any_event
        peak[d] = best


_compiled = None


def _kernel():
    """The compiled sweep (made on first use, cached next to this file), or the Python
    function without numba."""
    global _compiled
    if _compiled is None:
        try:
            from numba import njit
        except ImportError:                   # pragma: no cover - numba is a dependency
            _compiled = _sweep
        else:
            with blas_probe_skipped():            # (numbastart.py)
                _compiled = njit(_SIGNATURE, cache=True, nogil=True)(_sweep)
    return _compiled


def sweep_peak(users_buf, users_node, start, end, sizes, dev, region, kept_mask, staging,
               state, threshold: int, per_bytes, per_count) -> dict[int, int]:
    """Peak bytes per device: per_bytes (a device listed where per_count > 0, ascending)
    plus the staging buffers in use that persist, plus the most temporaries live at once
    (devices with temporaries but no persistent buffers after those, ascending): what
    BufferTable.peak computed with numpy and taskrt.liveness.peak_bytes_of_users.
    per_bytes and per_count are updated in place (pass copies)."""
    num_dev = len(per_bytes)
    peak = np.zeros(num_dev, dtype=np.int64)
    has_temp = np.zeros(num_dev, dtype=bool)
    c = np.ascontiguousarray
    i8 = np.int64
    _kernel()(c(users_buf, dtype=i8), c(users_node, dtype=i8), c(start, dtype=np.float64),
              c(end, dtype=np.float64), c(sizes, dtype=i8), c(dev, dtype=i8),
              c(region, dtype=i8), c(kept_mask, dtype=bool), c(staging, dtype=bool),
              c(state, dtype=bool), int(threshold), per_bytes, per_count, peak, has_temp)
    out = {int(d): int(per_bytes[d]) for d in np.flatnonzero(per_count)}
    for d in np.flatnonzero(has_temp).tolist():
        out[d] = out.get(d, 0) + int(peak[d])
    return out
