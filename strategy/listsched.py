"""The simulator's list scheduler over arrays, compiled with numba.

Nodes run in program order (ids 0..n-1). Node i starts when its predecessors have ended and
each of its resources is free (FIFO per resource in program order), and holds its resources
for dur[i]. Predecessors and resources are in CSR form (ptr, flat ids). The loop does the
same floating-point operations in the same order as the Python loop it replaced, so its
times are the same bits.

numba compiles the loop on first use in a process that simulates (a few seconds once; the
machine code is cached in __pycache__ next to this file, and later processes pay about a
second to import numba and load it). Without numba the same function runs as plain Python:
correct, about 100x slower.
"""
from __future__ import annotations

import numpy as np

_SIGNATURE = "void(f8[::1], i8[::1], i8[::1], i8[::1], i8[::1], i8, f8[::1], f8[::1], f8[::1])"


def _schedule(dur, res_ptr, res_ids, pred_ptr, preds, num_resources, start, end, busy):
    free = np.zeros(num_resources)
    for i in range(dur.shape[0]):
        t = 0.0
        for k in range(pred_ptr[i], pred_ptr[i + 1]):
            e = end[preds[k]]
            if e > t:
                t = e
        for k in range(res_ptr[i], res_ptr[i + 1]):
            f = free[res_ids[k]]
            if f > t:
                t = f
        d = dur[i]
        e = t + d
        for k in range(res_ptr[i], res_ptr[i + 1]):
            r = res_ids[k]
            free[r] = e
            busy[r] += d
        start[i] = t
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
            _compiled = njit(_SIGNATURE, cache=True, nogil=True)(_schedule)
    return _compiled


def list_schedule(dur, res_ptr, res_ids, pred_ptr, preds, num_resources: int):
    """(start, end, busy): per node its start and end time, per resource its busy seconds."""
    n = len(dur)
    start, end = np.zeros(n), np.zeros(n)
    busy = np.zeros(num_resources)
    _kernel()(np.ascontiguousarray(dur, dtype=np.float64),
              np.ascontiguousarray(res_ptr, dtype=np.int64),
              np.ascontiguousarray(res_ids, dtype=np.int64),
              np.ascontiguousarray(pred_ptr, dtype=np.int64),
              np.ascontiguousarray(preds, dtype=np.int64), num_resources, start, end, busy)
    return start, end, busy


def csr(counts) -> np.ndarray:
    """Row pointers of a CSR layout with these row lengths."""
    counts = np.asarray(counts, dtype=np.int64)
    ptr = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr
