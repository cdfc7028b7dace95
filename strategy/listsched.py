"""The simulator's list scheduler over arrays, compiled with numba.

Nodes run in program order (ids 0..n-1). Node i starts when its predecessors have ended and
each of its resources is free (FIFO per resource in program order), and holds its resources
for dur[i]; a copy over several links (its resources start with the `route` id) holds each
link in turn for dur[i] (_hold). Predecessors and resources are in CSR form (ptr, flat ids).

Host phases (strategy/simulator.py's host model): before its device work a node may hold
its issuing host threads (pre_ids) for pre_dur[i], and after it the receiving ones
(post_ids) for post_dur[i], each phase FIFO on those resources like any other. A node
without host resources does exactly the operations of the loop before host phases existed,
so a model without host costs gives the same bits as before. start[i] is when the node
first holds anything, run[i] when its device work starts, end[i] when it lets go.

Ready order (`ready_order=True`, strategy/simulator.py says when): instead of program order,
each resource serves its phases (host, device, receiving host) in the order they become
ready (ties in program order): the paper's Algorithm 1, and what the MPI executor does (its
ranks run whatever instruction is ready: taskrt/executor/scheduler.py), where program
order would keep a rank's thread waiting for one message while later work is ready.

Resuming (program order only, Checkpoints): node i's times depend only on nodes 0..i-1
(its predecessors come before it, and its resources' state is what those nodes left), so
a run saves the resources' state (free at, busy seconds) every EVERY nodes, and the next
run of a graph whose first `first` nodes are the same (delta simulation: the launches
before the first one a change touched) copies their times and starts at the checkpoint
before `first`, bit for bit what a whole run gives (the same additions in the same
order). Ready order pops nodes by time across the whole graph: it never resumes. Times
after the changed launches are recomputed, not compared: a change's new durations move
every later node on the critical path in practice.

numba compiles the loop on first use in a process that simulates (a few seconds once; the
machine code is cached in __pycache__ next to this file, and later processes pay about a
second to import numba and load it). Without numba the same function runs as plain Python:
correct, about 100x slower.
"""
from __future__ import annotations

import numpy as np

from taskrt.numbastart import loading_kernels

_SIGNATURE = ("void(f8[::1], i8[::1], i8[::1], i8[::1], i8[::1], i8, f8[::1], i8[::1], "
              "i8[::1], f8[::1], i8[::1], i8[::1], f8[::1], f8[::1], f8[::1], f8[::1], i8)")
_SIGNATURE_RESUMING = _SIGNATURE[:-1] + ", i8, i8, f8[:, ::1], f8[:, ::1])"


def _hold(free, busy, ptr, ids, i, t, d, route):
    """(start, end): node i's resources ids[ptr[i]:ptr[i + 1]] held for d from when they
    are all free, at t the earliest. Resources starting with id `route` (simulator.ROUTE)
    are a copy's links in route order: each in turn serves the copy for d as soon as it is
    free and the copy has reached it (at or after its start on the link before), so a link
    waits only for the copies ahead of it on that link, not for the others' queues (the
    links before buffer it); the copy is (start, end) on its last link."""
    k0 = ptr[i]
    if ptr[i + 1] - k0 > 1 and ids[k0] == route:
        for k in range(k0 + 1, ptr[i + 1]):
            r = ids[k]
            f = free[r]
            if f > t:
                t = f
            free[r] = t + d
            busy[r] += d
        return t, t + d
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
              pre_ids, post_dur, post_ptr, post_ids, start, run, end, busy, route, first,
              every, saved_free, saved_busy):
    """Program order. Before node i (i a multiple of `every`) the resources' state (when
    each is free, its busy seconds) is saved in row i // every of saved_free/saved_busy;
    the run starts at the saved row before node `first` (the caller has set start, run and
    end of the nodes before it), as nothing before a node changes what it sees."""
    free = np.zeros(num_resources)
    i0 = (first // every) * every
    if i0 > 0:
        free[:] = saved_free[i0 // every, :num_resources]
        busy[:] = saved_busy[i0 // every, :num_resources]
    for i in range(i0, dur.shape[0]):
        if i % every == 0:
            saved_free[i // every, :num_resources] = free
            saved_busy[i // every, :num_resources] = busy
        t = 0.0
        for k in range(pred_ptr[i], pred_ptr[i + 1]):
            e = end[preds[k]]
            if e > t:
                t = e
        first = -1.0
        if pre_ptr[i + 1] > pre_ptr[i]:              # the issuing host threads
            first, t = _hold(free, busy, pre_ptr, pre_ids, i, t, pre_dur[i], -1)
        t, e = _hold(free, busy, res_ptr, res_ids, i, t, dur[i], route)
        run[i] = t
        start[i] = t if first < 0 else first
        if post_ptr[i + 1] > post_ptr[i]:            # the receiving host threads
            _, e = _hold(free, busy, post_ptr, post_ids, i, e, post_dur[i], -1)
        end[i] = e


def _push(keys, vals, size, key, val):
    """Push (key, val) on the binary min-heap keys[:size], vals[:size] (ordered by key,
    then val); returns the new size."""
    i = size
    keys[i], vals[i] = key, val
    while i > 0:
        p = (i - 1) // 2
        if keys[p] < keys[i] or (keys[p] == keys[i] and vals[p] <= vals[i]):
            break
        keys[p], keys[i] = keys[i], keys[p]
        vals[p], vals[i] = vals[i], vals[p]
        i = p
    return size + 1


def _pop(keys, vals, size):
    """(key, val, new size): the least (key, val) of the heap, taken off it."""
    key, val = keys[0], vals[0]
    size -= 1
    keys[0], vals[0] = keys[size], vals[size]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and (keys[c + 1] < keys[c] or (keys[c + 1] == keys[c]
                                                      and vals[c + 1] < vals[c])):
            c += 1
        if keys[i] < keys[c] or (keys[i] == keys[c] and vals[i] <= vals[c]):
            break
        keys[c], keys[i] = keys[i], keys[c]
        vals[c], vals[i] = vals[i], vals[c]
        i = c
    return key, val, size


def _schedule_ready(dur, res_ptr, res_ids, pred_ptr, preds, num_resources, pre_dur, pre_ptr,
                    pre_ids, post_dur, post_ptr, post_ids, start, run, end, busy, route):
    """_schedule in ready order: phases (0 host, 1 device, 2 receiving host) taken from a
    heap by (ready time, node id * 3 + phase)."""
    n = dur.shape[0]
    free = np.zeros(num_resources)
    waiting = np.zeros(n, dtype=np.int64)
    succ_ptr = np.zeros(n + 1, dtype=np.int64)
    for i in range(n):
        waiting[i] = pred_ptr[i + 1] - pred_ptr[i]
        for k in range(pred_ptr[i], pred_ptr[i + 1]):
            succ_ptr[preds[k] + 1] += 1
    for i in range(n):
        succ_ptr[i + 1] += succ_ptr[i]
    succs = np.zeros(succ_ptr[n], dtype=np.int64)
    fill = succ_ptr[:n].copy()
    for i in range(n):
        for k in range(pred_ptr[i], pred_ptr[i + 1]):
            p = preds[k]
            succs[fill[p]] = i
            fill[p] += 1
    ready = np.zeros(n)
    keys = np.zeros(n + 1)
    vals = np.zeros(n + 1, dtype=np.int64)
    size = 0
    for i in range(n):
        if waiting[i] == 0:
            size = _push(keys, vals, size, 0.0, 3 * i)
    while size > 0:
        t, v, size = _pop(keys, vals, size)
        i, phase = v // 3, v % 3
        if phase == 0:
            start[i] = -1.0
            if pre_ptr[i + 1] > pre_ptr[i]:          # the issuing host threads
                first, e = _hold(free, busy, pre_ptr, pre_ids, i, t, pre_dur[i], -1)
                start[i] = first
                size = _push(keys, vals, size, e, 3 * i + 1)
                continue
            phase = 1
        if phase == 1:
            t, e = _hold(free, busy, res_ptr, res_ids, i, t, dur[i], route)
            run[i] = t
            if start[i] < 0:
                start[i] = t
            if post_ptr[i + 1] > post_ptr[i]:        # the receiving host threads
                size = _push(keys, vals, size, e, 3 * i + 2)
                continue
        else:
            _, e = _hold(free, busy, post_ptr, post_ids, i, t, post_dur[i], -1)
        end[i] = e
        for k in range(succ_ptr[i], succ_ptr[i + 1]):
            s = succs[k]
            if e > ready[s]:
                ready[s] = e
            waiting[s] -= 1
            if waiting[s] == 0:
                size = _push(keys, vals, size, ready[s], 3 * s)


_compiled = None
_compiled_ready = None
_helpers_jitted = False


def _kernel(ready_order: bool = False):
    """The compiled loop (in program or ready order), made on first use (numba is imported
    only by processes that simulate), or the Python loop without numba. Each order is
    loaded when first asked for: ready order serves only host costs (NodeTimer.ready_order),
    so most processes never load it (~0.01 s)."""
    global _compiled, _compiled_ready, _helpers_jitted
    made = _compiled_ready if ready_order else _compiled
    if made is not None:
        return made
    try:
        from numba import njit
    except ImportError:                   # pragma: no cover - numba is a dependency
        _compiled, _compiled_ready = _schedule, _schedule_ready
    else:
        global _hold, _push, _pop
        with loading_kernels():               # (numbastart.py)
            if not _helpers_jitted:
                _hold = njit(cache=True, nogil=True, inline="always")(_hold)
                _push = njit(cache=True, nogil=True)(_push)
                _pop = njit(cache=True, nogil=True)(_pop)
                _helpers_jitted = True
            if ready_order:
                _compiled_ready = njit(_SIGNATURE, cache=True, nogil=True)(_schedule_ready)
            else:
                _compiled = njit(_SIGNATURE_RESUMING, cache=True, nogil=True)(_schedule)
    return _compiled_ready if ready_order else _compiled


EVERY = 1024          # nodes between checkpoints (at the least)


class Checkpoints:
    """The resources' state every `every` nodes of the last program-order run (filled by
    the run), and its start, run and end (`last`; None until a run completes): what a run
    of a graph whose first nodes are those of that run, with the same arrays, resumes from
    (delta simulation)."""
    __slots__ = ("every", "free", "busy", "last", "before")

    def __init__(self, n: int, num_resources: int, every: int | None = None):
        # Every EVERY nodes, or fewer rows for a large graph on many resources (<= 32 MiB).
        self.every = every or max(EVERY, -(-2 * n * max(num_resources, 1) // (1 << 22)))
        rows = (n + n // 4) // self.every + 2          # room for the graph to grow a little
        width = num_resources + (16 if n else 0)
        self.free = np.zeros((rows, width))
        self.busy = np.zeros((rows, width))
        self.last: tuple | None = None
        # What the last run overwrote (restore() puts it back), None when it started
        # the checkpoints again: (free, busy, first row, its rows before, last before).
        self.before: tuple | None = None

    def restore(self, before: tuple | None) -> None:
        """Put back the checkpoints of before a run (its `before`), so that the next run
        may resume from them as from the run before it; with None (or checkpoints made
        again since) the next run starts from the first node."""
        if before is None or before[0] is not self.free:
            self.last = None
            return
        _, _, row, free, busy, last = before
        self.free[row:row + len(free)] = free
        self.busy[row:row + len(busy)] = busy
        self.last = last

    def fits(self, n: int, num_resources: int) -> bool:
        return n // self.every + 2 <= self.free.shape[0] and \
            num_resources <= self.free.shape[1]


def list_schedule(dur, res_ptr, res_ids, pred_ptr, preds, num_resources: int, host=None,
                  ready_order: bool = False, checkpoints: Checkpoints | None = None,
                  first: int = 0, route: int = -1):
    """(start, run, end, busy): per node when it first holds a resource, when its device
    work starts and when it ends; per resource its busy seconds. `host` is None (no host
    phases) or (pre_dur, pre_ptr, pre_ids, post_dur, post_ptr, post_ids); `ready_order`:
    resources serve in ready order instead of program order. `checkpoints` (program
    order): filled as the run goes; with `first` > 0 the run resumes from them, the caller
    promising that nodes 0..first-1 and everything about them are those of the run that
    filled them (their times are taken from checkpoints.last). A run that cannot resume
    (a first run, a graph or resource count the checkpoints do not fit) starts again.
    `route`: the id that marks a node's resources as a copy's links in route order (-1:
    none; simulator.timeline passes ROUTE's)."""
    n = len(dur)
    # In program order every node's times are written (those before the checkpoint
    # copied from the last run below, the rest by the loop): no zeroing pass over them.
    # (A simulation's 3 + 3 arrays of n zeros were ~0.75 ms of a proposal's list schedule
    # at Inception @16, 38k nodes, in a search's process: memset of fresh heap.)
    alloc = np.zeros if ready_order else np.empty
    start, run, end = alloc(n), alloc(n), alloc(n)
    busy = np.zeros(num_resources)
    if checkpoints is None or ready_order:
        checkpoints, first = Checkpoints(0, num_resources, every=n + 1), 0
    last, checkpoints.last = checkpoints.last, None
    made_again = False
    if last is None or not checkpoints.fits(n, num_resources):
        if not checkpoints.fits(n, num_resources):
            checkpoints.__init__(n, num_resources)
            made_again = True
        first = 0
    # (the row before node `first` was written: first < the last run's node count)
    first = max(0, min(first, len(last[0]) - 1 if last is not None else 0, n))
    keep = (first // checkpoints.every) * checkpoints.every
    if not ready_order:
        # The rows this run writes, kept so that an undo can put them back (restore).
        rows = slice(keep // checkpoints.every, (n - 1) // checkpoints.every + 1)
        checkpoints.before = None if made_again else \
            (checkpoints.free, checkpoints.busy, rows.start, checkpoints.free[rows].copy(),
             checkpoints.busy[rows].copy(), last)
    for new, old in zip((start, run, end), last or ()):
        new[:keep] = old[:keep]
    if host is None:
        host = _no_host(n)
    f8, i8 = np.float64, np.int64
    pre_dur, pre_ptr, pre_ids, post_dur, post_ptr, post_ids = host
    c = np.ascontiguousarray
    args = (c(dur, dtype=f8), c(res_ptr, dtype=i8), c(res_ids, dtype=i8),
            c(pred_ptr, dtype=i8), c(preds, dtype=i8), num_resources,
            c(pre_dur, dtype=f8), c(pre_ptr, dtype=i8), c(pre_ids, dtype=i8),
            c(post_dur, dtype=f8), c(post_ptr, dtype=i8), c(post_ids, dtype=i8),
            start, run, end, busy, route)
    if ready_order:
        _kernel(True)(*args)
    else:
        _kernel(False)(*args, first, checkpoints.every, checkpoints.free, checkpoints.busy)
        checkpoints.last = (start, run, end)
    return start, run, end, busy


_NO_HOST = [np.zeros(0), np.zeros(1, dtype=np.int64)]     # (seconds, pointers), grown


def _no_host(n: int) -> tuple:
    """list_schedule's host phases for n nodes without any: views of zero arrays kept
    from run to run (the loop only reads them), made again only for a larger graph."""
    if len(_NO_HOST[0]) < n:
        size = max(n, 2 * len(_NO_HOST[0]))
        _NO_HOST[:] = [np.zeros(size), np.zeros(size + 1, dtype=np.int64)]
    zeros, ptr = _NO_HOST
    empty = ptr[:0]
    return (zeros[:n], ptr[:n + 1], empty, zeros[:n], ptr[:n + 1], empty)


def csr(counts) -> np.ndarray:
    """Row pointers of a CSR layout with these row lengths."""
    counts = np.asarray(counts, dtype=np.int64)
    ptr = np.empty(len(counts) + 1, dtype=np.int64)      # (no zeroing pass: all written)
    ptr[0] = 0
    np.cumsum(counts, out=ptr[1:])
    return ptr
