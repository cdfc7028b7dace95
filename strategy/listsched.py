"""The simulator's list scheduler over arrays, compiled with numba.

Nodes run in program order (ids 0..n-1). Node i starts when its predecessors have ended and
each of its resources is free (FIFO per resource in program order), and holds its resources
for dur[i]. Predecessors and resources are in CSR form (ptr, flat ids).

Host phases (strategy/simulator.py's host model): before its device work a node may hold
its issuing host threads (pre_ids) for pre_dur[i], and after it the receiving ones
(post_ids) for post_dur[i], each phase FIFO on those resources like any other. A node
without host resources does exactly the operations of the loop before host phases existed,
so a model without host costs gives the same bits as before. start[i] is when the node
first holds anything, run[i] when its device work starts, end[i] when it lets go.

numba compiles the loop on first use in a process that simulates (a few seconds once; the
machine code is cached in __pycache__ next to this file, and later processes pay about a
second to import numba and load it). Without numba the same function runs as plain Python:
correct, about 100x slower.
"""
from __future__ import annotations

import numpy as np

_SIGNATURE = ("void(f8[::1], i8[::1], i8[::1], i8[::1], i8[::1], i8, f8[::1], i8[::1], "
              "i8[::1], f8[::1], i8[::1], i8[::1], f8[::1], f8[::1], f8[::1], f8[::1])")


def _hold(free, busy, ptr, ids, i, t, d):
    """(start, end): node i's resources ids[ptr[i]:ptr[i + 1]] held for d from when they
    are all free, at t the earliest."""
    for k in range(ptr[i], ptr[i + 1]):
        f = free[ids[k]]
        if f > t:
            t = f
    e = t + d
    for k in range(ptr[i], ptr[i + 1]):
        r = ids[k]
        free[r] = e
        busy[r] += d
    return t, e


def _schedule(dur, res_ptr, res_ids, pred_ptr, preds, num_resources, pre_dur, pre_ptr,
              pre_ids, post_dur, post_ptr, post_ids, start, run, end, busy):
    free = np.zeros(num_resources)
    for i in range(dur.shape[0]):
        t = 0.0
        for k in range(pred_ptr[i], pred_ptr[i + 1]):
            e = end[preds[k]]
            if e > t:
                t = e
        first = -1.0
        if pre_ptr[i + 1] > pre_ptr[i]:              # the issuing host threads
            first, t = _hold(free, busy, pre_ptr, pre_ids, i, t, pre_dur[i])
        t, e = _hold(free, busy, res_ptr, res_ids, i, t, dur[i])
        run[i] = t
        start[i] = t if first < 0 else first
        if post_ptr[i + 1] > post_ptr[i]:            # the receiving host threads
            _, e = _hold(free, busy, post_ptr, post_ids, i, e, post_dur[i])
        end[i] = e


_compiled = None


def _kernel():
    """The compiled loop, made on first use (numba is imported only by processes that
    simulate), or the Python loop without numba."""
    global _compiled
    if _compiled is None:
        try:
            from numba import njit
        except ImportError:                   # pragma: no cover - numba is a dependency
            _compiled = _schedule
        else:
            global _hold
            _hold = njit(cache=True, nogil=True, inline="always")(_hold)
            _compiled = njit(_SIGNATURE, cache=True, nogil=True)(_schedule)
    return _compiled


def list_schedule(dur, res_ptr, res_ids, pred_ptr, preds, num_resources: int, host=None):
    """(start, run, end, busy): per node when it first holds a resource, when its device
    work starts and when it ends; per resource its busy seconds. `host` is None (no host
    phases) or (pre_dur, pre_ptr, pre_ids, post_dur, post_ptr, post_ids)."""
    n = len(dur)
    start, run, end = np.zeros(n), np.zeros(n), np.zeros(n)
    busy = np.zeros(num_resources)
    if host is None:
        none = np.zeros(n + 1, dtype=np.int64)
        empty = np.zeros(0, dtype=np.int64)
        host = (np.zeros(n), none, empty, np.zeros(n), none, empty)
    f8, i8 = np.float64, np.int64
    pre_dur, pre_ptr, pre_ids, post_dur, post_ptr, post_ids = host
    c = np.ascontiguousarray
    _kernel()(c(dur, dtype=f8), c(res_ptr, dtype=i8), c(res_ids, dtype=i8),
              c(pred_ptr, dtype=i8), c(preds, dtype=i8), num_resources,
              c(pre_dur, dtype=f8), c(pre_ptr, dtype=i8), c(pre_ids, dtype=i8),
              c(post_dur, dtype=f8), c(post_ptr, dtype=i8), c(post_ids, dtype=i8),
              start, run, end, busy)
    return start, run, end, busy


def csr(counts) -> np.ndarray:
    """Row pointers of a CSR layout with these row lengths."""
    counts = np.asarray(counts, dtype=np.int64)
    ptr = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr
