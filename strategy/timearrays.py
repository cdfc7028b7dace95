"""What the list scheduler needs of every node of a graph (durations, resources, host
phases) as arrays, computed per task class and device rather than per node.

A point task's duration is a function of its cost key and its device's spec (the cost
model's contract: strategy/costs/model.py looks it up by (cost key, device kind)), its
resource is its device's compute unit and its host phase its device's host thread
(NodeTimer.timing, host_phases). Tasks of one class (taskrt/taskclasses.py) have one cost
key, so the cost model is asked once per (class, device spec), of the class's first task.
Copies and reduces (most of the nodes under tensor parallelism: taskrt/othercolumns.py)
are timed by columns: a copy's time is its (src, dst) pair's line in its bytes
(NodeTimer.copy_line), a reduce's its device's memory time of the bytes it moves; all-reduces
(few) and, with host costs, every non-task node are asked one by one. Resource ids
are numbered in the order nodes first use them, as a loop over the nodes would (a
result's `busy` lists resources in that order): the non-task nodes' resource lists are
rows of small tables (a copy's is its (src, dst) pair's), so the first uses are read per
row, the rows renumbered once and joined into the CSR arrays by one compiled pass.

Only for NodeTimer itself: a timer that overrides timing or host_phases (a preempted
timer draws random slices per node, in node order) is asked node by node
(simulator.node_arrays).
"""
from __future__ import annotations

from itertools import chain

import numpy as np

from taskrt.othercolumns import other_columns
from taskrt.taskgraph import ALLREDUCE

from .listsched import csr
from taskrt.numbastart import loading_kernels


def _group(at: np.ndarray, row: np.ndarray, rows: list) -> tuple:
    """Nodes at positions `at` (among the non-task nodes) whose resource ids are rows[row[k]]
    (lists) as (at, row, per row its length, its start in flat, flat: the rows joined)."""
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    ptr = csr(lengths)
    return at, row, lengths, ptr[:-1], np.fromiter(chain.from_iterable(rows), dtype=np.int64,
                                                  count=int(ptr[-1]))


def _lower_first_uses(first_use: np.ndarray, others: np.ndarray, groups: list, phase: int,
                      width: int) -> None:
    """first_use[r] lowered to the place of every use of resource r by the groups' nodes in
    `phase`, (node * 3 + phase) * width + its index in the node's list: per row, of its
    first node only (the row's other nodes come later), not per node and use."""
    for at, row, lengths, starts, flat in groups:
        if not len(flat):
            continue
        first = np.full(len(lengths), np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(first, row, others[at])          # (every row is some node's)
        row_of = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
        within = np.arange(len(flat), dtype=np.int64) - starts[row_of]
        np.minimum.at(first_use, flat, (first[row_of] * 3 + phase) * width + within)


def _phase(n: int, task_ids: np.ndarray, task_value, others: np.ndarray, groups: list,
           new: np.ndarray) -> tuple:
    """(counts, flat) in CSR form over n nodes of one phase: each task of `task_ids` has one
    id, task_value (per task; None: none), the groups' nodes their rows', all renumbered by
    `new` (provisional id -> id); the rows are joined per group in one gather and one
    scatter, each row's ids renumbered once."""
    counts = np.zeros(n, dtype=np.int64)
    if task_value is not None:
        counts[task_ids] = 1
    for at, row, lengths, _, _ in groups:
        counts[others[at]] = lengths[row]
    ptr = csr(counts)
    flat = np.empty(int(ptr[-1]), dtype=np.int64)
    if task_value is not None:
        flat[ptr[task_ids]] = new[task_value]
    join, c = _join_kernel(), np.ascontiguousarray
    for at, row, lengths, starts, row_flat in groups:
        join(flat, ptr[others[at]], *(c(a, dtype=np.int64) for a in (row, lengths, starts)),
             new[row_flat])
    return counts, flat


def _join(flat, at, row, lengths, starts, row_flat):
    """flat[at[k]:][:n] = row_flat[starts[r]:][:n] for each k, r = row[k], n = lengths[r]:
    one pass writing each entry once (numpy's repeat and arange over the ~6M entries of
    GPT-3 2.7B's copies at 1,024 GPUs made ~8 arrays of that size)."""
    for k in range(at.shape[0]):
        r = row[k]
        p = at[k]
        s = starts[r]
        for j in range(lengths[r]):
            flat[p + j] = row_flat[s + j]


_compiled_join = None


def _join_kernel():
    """_join compiled (on first use; cached next to this file), or as Python without numba."""
    global _compiled_join
    if _compiled_join is None:
        try:
            from numba import njit
        except ImportError:                   # pragma: no cover - numba is a dependency
            _compiled_join = _join
        else:
            with loading_kernels():               # (numbastart.py)
                _compiled_join = njit("void(i8[::1], i8[::1], i8[::1], i8[::1], i8[::1], "
                                      "i8[::1])", cache=True, nogil=True)(_join)
    return _compiled_join


def timings_one_by_one(nodes, timer, ids) -> tuple:
    """The timer asked node by node, in order: lists (durations, resource counts, resource
    ids joined, and the host phases' durations, counts and ids before and after; those six
    empty without host costs). `ids(resources)`: their ids, as a list."""
    dur, counts, flat = [], [], []
    pre_d, pre_c, pre_f, post_d, post_c, post_f = [], [], [], [], [], []
    with_host = bool(timer.host_costs)
    timing, host_phases = timer.timing, timer.host_phases
    for node in nodes:
        d, rs = timing(node)
        dur.append(d)
        counts.append(len(rs))
        flat += ids(rs)
        if with_host:
            hd, hr, pd, pr = host_phases(node)
            pre_d.append(hd)
            pre_c.append(len(hr))
            pre_f += ids(hr)
            post_d.append(pd)
            post_c.append(len(pr))
            post_f += ids(pr)
    return dur, counts, flat, pre_d, pre_c, pre_f, post_d, post_c, post_f


_DENSE_MAX = 1 << 22        # the largest table distinct() makes (16 MB of int32)


def distinct(keys: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(keys, return_inverse=True), the inverse flat, of int keys in [0, size): by
    a table of `size` entries where that is at most _DENSE_MAX and 4 x len(keys) + 1024 (no
    sort: 1.53M copies' (src, dst) pairs at 1,024 GPUs, ~0.08 s less), else np.unique."""
    if (size > _DENSE_MAX or size > 4 * len(keys) + 1024 or
            (len(keys) and (int(keys.min()) < 0 or int(keys.max()) >= size))):
        values, inverse = np.unique(keys, return_inverse=True)
        return values, inverse.reshape(-1)
    seen = np.zeros(size, dtype=bool)
    seen[keys] = True
    values = np.flatnonzero(seen)
    table = np.empty(size, dtype=np.int32)
    table[values] = np.arange(len(values), dtype=np.int32)
    return values, table[keys].astype(np.int64)


def other_timings(cols, timer, pids) -> tuple:
    """(durations, groups) of the non-task nodes `cols` (OtherColumns), in their order, as
    timer.timing gives them node by node (no host phases): groups of nodes whose resource
    ids (`pids(resources)`: a list) are rows of a table (_group: per copy its (src, dst)
    pair's, per reduce its device's, the others one by one), each node in one."""
    n, i8 = len(cols), np.int64
    dur = np.zeros(n, dtype=np.float64)
    # Per group of nodes: (positions, per node its row in `rows`, rows: lists of ids).
    groups = []
    one_by_one = cols.allreduce_at
    at = cols.copy_at
    if len(at):
        top = int(max(cols.copy_src.max(), cols.copy_dst.max())) + 1
        pairs, row = distinct(cols.copy_src * top + cols.copy_dst, top * top)
        lines = [timer.copy_line(p // top, p % top) for p in pairs.tolist()]
        if any(line is None for line in lines):           # a model without transfer_line
            one_by_one = np.concatenate([one_by_one, at])
        else:
            start, scale, bandwidth, resources = zip(*lines)
            start = np.array(start, dtype=np.float64)[row]
            scale = np.array(scale, dtype=i8)[row]
            dur[at] = start + (scale * cols.copy_bytes) / np.array(bandwidth,
                                                                   dtype=np.float64)[row]
            groups.append((at, row, [pids(r) for r in resources]))
    at = cols.reduce_at
    if len(at):
        # moved = its bytes and its inputs', on its device: launch overhead + moved / memory
        # bandwidth (NodeTimer._memory_time).
        total = np.zeros(len(cols.input_bytes) + 1, dtype=i8)
        np.cumsum(cols.input_bytes, out=total[1:])
        ptr = cols.input_ptr
        moved = cols.reduce_bytes + (total[ptr[1:]] - total[ptr[:-1]])
        devices, row = np.unique(cols.reduce_device, return_inverse=True)
        row = row.reshape(-1)
        specs = [timer.model.device(d) for d in devices.tolist()]
        overhead = np.array([s.launch_overhead for s in specs], dtype=np.float64)[row]
        bandwidth = np.array([s.memory_bandwidth for s in specs], dtype=np.float64)[row]
        dur[at] = overhead + moved / bandwidth
        groups.append((at, row, [pids((timer.compute(d),)) for d in devices.tolist()]))
    one_by_one = np.sort(one_by_one)
    timing, nodes, rows = timer.timing, cols.nodes, []
    # An all-reduce's timing is the model's of its devices and bytes: asked once per
    # distinct pair (Megatron GPT@1,024: 1,890 all-reduces, each ~0.1 ms of route walks).
    known: dict = {}
    for k in one_by_one.tolist():
        node = nodes[k]
        if node.kind is ALLREDUCE:
            key = (node.devices, node.nbytes)
            got = known.get(key)
            if got is None:
                d, rs = timing(node)
                got = known[key] = (d, pids(rs))
            dur[k] = got[0]
            rows.append(got[1])
            continue
        d, rs = timing(node)
        dur[k] = d
        rows.append(pids(rs))
    if len(one_by_one):
        groups.append((one_by_one, np.arange(len(rows), dtype=i8), rows))
    return dur, [_group(*g) for g in groups]


def node_arrays_by_class(graph, classes, timer, resources) -> tuple:
    """(dur, res_counts, res_ids, host): as simulator.node_arrays gives them (`host`:
    None without host costs), resources numbered in `resources` (holding only ROUTE when
    called)."""
    nodes, model = graph.nodes, timer.model
    n = len(nodes)
    with_host = bool(timer.host_costs)
    # Resources get provisional ids here, renumbered by first use at the end.
    provisional: dict = {}

    def pid(r) -> int:
        i = provisional.get(r)
        if i is None:
            i = provisional[r] = len(provisional)
        return i
    # A tuple of resources -> their ids, by identity: the timer hands out one tuple per
    # device, per copy key and per all-reduce group (hashing a tuple of links would hash
    # every link, a dataclass: Python code per link and node).
    by_tuple: dict = {}

    def pids(rs) -> list:
        got = by_tuple.get(id(rs))
        if got is None or got[0] is not rs:
            got = by_tuple[id(rs)] = (rs, [pid(r) for r in rs])
        return got[1]
    # Tasks: per device its spec, compute resource and host thread.
    task_dev = classes.device
    devices = np.unique(task_dev)
    n_dev = int(devices.max()) + 1 if len(devices) else 0
    spec_of: dict = {}                         # spec -> index
    spec_idx = np.zeros(n_dev, dtype=np.int64)
    compute = np.zeros(n_dev, dtype=np.int64)
    host = np.zeros(n_dev, dtype=np.int64)
    specs = []
    for d in devices.tolist():
        spec = model.device(d)
        s = spec_of.get(spec)
        if s is None:
            s = spec_of[spec] = len(specs)
            specs.append(spec)
        spec_idx[d] = s
        compute[d] = pid(timer.compute(d))
        if with_host:
            host[d] = pid(timer.host(d))
    # Per (class, spec): the cost model's time of the class's first task on that spec.
    pair = classes.cls * max(len(specs), 1) + spec_idx[task_dev]
    pairs, inverse = distinct(pair, (len(classes) + 1) * max(len(specs), 1))
    task_time = timer.costs.task_time
    times = np.array([task_time(classes.first[p // len(specs)], specs[p % len(specs)])
                      for p in pairs.tolist()], dtype=np.float64)
    dur = np.zeros(n, dtype=np.float64)
    dur[classes.ids] = times[inverse]
    # Other nodes: by columns, or with host costs one by one; per phase (device, issuing
    # host thread, receiving host thread) groups of nodes whose resource ids are rows.
    others = classes.others
    i8 = np.int64
    if with_host:
        o_dur, o_counts, o_flat, pre_d, pre_c, pre_f, post_d, post_c, post_f = \
            timings_one_by_one([nodes[i] for i in others.tolist()], timer, pids)
        o_dur = np.array(o_dur, dtype=np.float64)
        each = np.arange(len(others), dtype=i8)       # (a row per node)
        phases = [[(each, each, np.array(c, dtype=i8), csr(c)[:-1], np.array(f, dtype=i8))]
                  for c, f in ((o_counts, o_flat), (pre_c, pre_f), (post_c, post_f))]
    else:
        o_dur, groups = other_timings(other_columns(graph, classes), timer, pids)
        phases = [groups]
    dur[others] = o_dur
    # Renumber the resources by first use: node by node, its device resources, then the
    # issuing and receiving host threads, each in order. A use's place in that order is
    # (node * 3 + phase) * width + its index in the node's list of that phase; per resource
    # its least, over the other nodes' rows (each row's first node: _lower_first_uses) and,
    # for the tasks (one device resource and one host thread each), per device its first
    # task. (Not a sort of all ~1M uses, nor a pass over the ~6M of the copies' lists:
    # GPT-3 2.7B at 1,024 GPUs.)
    width = 1 + max((int(g[2].max()) for groups in phases for g in groups if len(g[2])),
                    default=0)
    never = np.iinfo(i8).max
    first_use = np.full(len(provisional), never, dtype=i8)
    if len(task_dev):
        first_task = np.full(n_dev, never, dtype=i8)
        np.minimum.at(first_task, task_dev, classes.ids)
        np.minimum.at(first_use, compute[devices], first_task[devices] * 3 * width)
        if with_host:
            np.minimum.at(first_use, host[devices], (first_task[devices] * 3 + 1) * width)
    for phase, groups in enumerate(phases):
        _lower_first_uses(first_use, others, groups, phase, width)
    seen = np.flatnonzero(first_use < never)
    used = seen[np.argsort(first_use[seen])]          # provisional ids by first use
    new = np.full(len(provisional), -1, dtype=i8)
    items = list(provisional)
    new[used] = [resources.id(items[p]) for p in used.tolist()]
    # Per phase the CSR over all nodes, renumbered: a task's device resource, its host
    # thread (NodeTimer.host_phases: the same host cost for every task, on its device's
    # thread, and nothing after), the other nodes' rows.
    res_counts, res_ids = _phase(n, classes.ids, compute[task_dev], others, phases[0], new)
    host_arrays = None
    if with_host:
        pre_dur = np.zeros(n, dtype=np.float64)
        post_dur = np.zeros(n, dtype=np.float64)
        if len(classes.first):
            pre_dur[classes.ids] = timer.host_phases(classes.first[0])[0]
        pre_dur[others] = np.array(pre_d, dtype=np.float64)
        post_dur[others] = np.array(post_d, dtype=np.float64)
        pre_counts, pre_ids = _phase(n, classes.ids, host[task_dev], others, phases[1], new)
        post_counts, post_ids = _phase(n, classes.ids, None, others, phases[2], new)
        host_arrays = (pre_dur, pre_counts, pre_ids, post_dur, post_counts, post_ids)
    return dur, res_counts, res_ids, host_arrays
