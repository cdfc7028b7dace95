"""Node groups: the planned graph kept in pieces that a re-plan replaces one at a time.

A group is one launch's nodes for one region (the copies, reductions and all-reduces its
reads need) or one launch's point tasks. Program order is the groups in launch order, each
launch's region groups in the order it first reads them, then its tasks: exactly the
TaskGraph's node order. A group records its predecessors as (group id, index in group)
pairs, so a group that no re-plan touched stays valid however the groups before it grow or
shrink: node ids are resolved in bulk, with arrays (`assemble`), whenever a whole graph is
needed.

Why this holds: a node's predecessors come from the regions it touches (the same region's
earlier nodes, or tasks through a buffer of that region) or from the task a launch takes
state from. Re-planning a region rebuilds every group of every launch that touches it, and
a replaced launch's regions are all re-planned; so a group that is not rebuilt refers only
to groups that were not rebuilt either, or to tasks by point index (stable while the
launch's points are).
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from operator import attrgetter

import numpy as np

_EMPTY = np.zeros(0, dtype=np.int64)
_GID, _PRED_GID = attrgetter("gid"), attrgetter("pred_gid")


@dataclass(eq=False, slots=True)
class NodeGroup:
    key: tuple                  # (launch index, region name), or (launch index, None): tasks
    gid: int                    # stable per key: the id predecessors refer to
    nodes: list
    pred_count: np.ndarray      # per node, how many predecessors
    pred_gid: np.ndarray        # flattened predecessors: their group id ...
    pred_idx: np.ndarray        # ... and index in that group
    staged: list | None = None  # per node: the copies behind a reduce's inputs (or None)
    # A class member's read group: its template entry's othercolumns.EntryColumns, which
    # also say which copies stage its reduces' inputs (then `staged` is None); None: a
    # one-shot graph reads the group's columns from its nodes.
    columns: object = None
    # A read group moved from a template entry's nodes (movedreads.EntryMoves: node for
    # node the same kinds, devices and volumes), for a consumer that relabels per entry.
    template: object = None

    @classmethod
    def of(cls, key, gid: int, nodes: list, preds: list, staged=None) -> "NodeGroup":
        """`preds`: per node, a list (or a set) of (group id, index) pairs."""
        counts = np.fromiter(map(len, preds), dtype=np.int64, count=len(preds))
        total = int(counts.sum())
        if total:
            # (a C loop over the pairs' numbers: np.array of a list of tuples is ~2x slower)
            arr = np.fromiter(chain.from_iterable(chain.from_iterable(preds)), dtype=np.int64,
                              count=2 * total)
            gids, idx = arr[0::2].copy(), arr[1::2].copy()
        else:
            gids = idx = _EMPTY
        return cls(key, gid, nodes, counts, gids, idx, staged)

    def __len__(self) -> int:
        return len(self.nodes)


def same_preds(a: NodeGroup, b: NodeGroup, any_order: bool = True) -> bool:
    """Whether groups a and b (of as many nodes) give each node the same set of
    predecessors, in whatever order (`any_order` False: in the same order): a node's
    predecessors are collected in a set (Planner._build_tasks), and equal sets may list
    their pairs in another order. Equal arrays answer at once, and so do unequal sums of
    the group ids or indices; else, with equal counts, each group's pairs as one key per
    (node, group id, index), sorted, are compared (a node lists a pair once)."""
    if a.pred_count.tobytes() != b.pred_count.tobytes():
        return False
    if a.pred_gid.tobytes() == b.pred_gid.tobytes() and \
            a.pred_idx.tobytes() == b.pred_idx.tobytes():
        return True         # (int64 arrays: equal bytes, equal arrays)
    if not any_order or a.pred_gid.sum() != b.pred_gid.sum() or \
            a.pred_idx.sum() != b.pred_idx.sum():
        return False        # (equal sets, equal sums; numpy's sums wrap alike)
    rows = np.repeat(np.arange(len(a.pred_count), dtype=np.int64), a.pred_count)
    gid_width = int(max(a.pred_gid.max(), b.pred_gid.max())) + 1
    idx_width = int(max(a.pred_idx.max(), b.pred_idx.max())) + 1
    if min(a.pred_gid.min(), b.pred_gid.min(), a.pred_idx.min(), b.pred_idx.min()) < 0 or \
            len(a.pred_count) * gid_width * idx_width >= 2 ** 62:
        order_a = np.lexsort((a.pred_idx, a.pred_gid, rows))
        order_b = np.lexsort((b.pred_idx, b.pred_gid, rows))
        return bool(np.array_equal(a.pred_gid[order_a], b.pred_gid[order_b]) and
                    np.array_equal(a.pred_idx[order_a], b.pred_idx[order_b]))
    keys = [np.sort((rows * gid_width + g.pred_gid) * idx_width + g.pred_idx)
            for g in (a, b)]
    return bool(np.array_equal(keys[0], keys[1]))


@dataclass(eq=False, slots=True)
class GroupRun:
    """Consecutive groups (e.g. one launch's) joined into one set of arrays, so that a
    graph is assembled from a few runs rather than many small groups, and a run that no
    change touched is reused as it is."""
    gids: np.ndarray            # per group: its id ...
    offsets: np.ndarray         # ... and the index of its first node within the run
    size: int                   # nodes in the run
    pred_count: np.ndarray
    pred_gid: np.ndarray
    pred_idx: np.ndarray

    @classmethod
    def of(cls, groups: list) -> "GroupRun":
        sizes = np.fromiter((len(g.nodes) for g in groups), dtype=np.int64, count=len(groups))
        offsets = np.zeros(len(groups), dtype=np.int64)
        if len(groups) > 1:
            np.cumsum(sizes[:-1], out=offsets[1:])
        return cls(np.fromiter((g.gid for g in groups), dtype=np.int64, count=len(groups)),
                   offsets, int(sizes.sum()), join([g.pred_count for g in groups]),
                   join([g.pred_gid for g in groups]), join([g.pred_idx for g in groups]))


def join(arrays: list) -> np.ndarray:
    """The arrays concatenated (the one array itself when there is one)."""
    return np.concatenate(arrays) if len(arrays) != 1 else arrays[0]


@dataclass(slots=True)
class Assembled:
    """Runs of groups in program order with node ids resolved: node i of a group has id
    (its run's first id) + (the group's offset in its run) + i; predecessors in CSR form
    (pred_ptr, preds), each node's in its group's order (unsorted, no duplicates)."""
    pred_ptr: np.ndarray
    preds: np.ndarray

    @property
    def num_nodes(self) -> int:
        return int(self.pred_ptr.shape[0] - 1)


# A group with this many edges has its rows sorted by assemble while they are in the caches;
# smaller ones in one pass over the graph after (a numpy call per group costs more than a
# small group's sort: per group for all, a search of Inception --small on 2 devices that
# explains its best strategies made 2.7x fewer proposals).
SORT_IN_GROUP = 4096
# A graph with this many edges is assembled in place, group by group (fresh memory costs
# more than the numpy calls per group there); a smaller one joined and resolved at once
# (the numpy calls per group cost more: Inception --small on 2 devices, whose search
# explains its best strategies, has ~2,000 groups of a few edges each).
ASSEMBLE_IN_PLACE = 1 << 20


def assemble(groups: list, num_gids: int, sort: bool = False) -> Assembled:
    """Resolve the groups' predecessor references into node ids, with arrays. A graph of
    fewer than ASSEMBLE_IN_PLACE edges: joined and resolved at once (`resolve`, a few numpy
    calls), with `sort` each node's predecessors ascending by one sorted_rows pass. A larger
    one: each group's written straight into the graph's two arrays (a numpy call or two per
    group), not joined first; with `sort`, the rows of groups of SORT_IN_GROUP edges or more
    sorted while they are in the CPU's caches (at Megatron GPT@1,024, 0.2 s less than one
    pass over all rows after), the small groups' rows in one pass at the end. A graph's
    first arrays of millions of entries are fresh memory, whose first touch costs more than
    the arithmetic (Megatron GPT@1,024: 6.6M edges; joining the groups' arrays and then
    resolving them made three fresh edge arrays, this one; `resolve` on joined runs is delta
    simulation's and this one's oracle in tests/taskrt/test_nodegroups.py)."""
    n = len(groups)
    if not n:
        return Assembled(np.zeros(1, dtype=np.int64), _EMPTY)
    edges = np.fromiter(map(len, map(_PRED_GID, groups)), dtype=np.int64, count=n)
    if int(edges.sum()) < ASSEMBLE_IN_PLACE:      # joined, then resolved (few numpy calls)
        run = GroupRun.of(groups)
        one = np.ones(1, dtype=np.int64)
        asm = resolve(run.gids, run.offsets, one * len(run.gids), one * run.size,
                      run.pred_count, run.pred_gid, run.pred_idx, num_gids)
        if sort:
            sorted_rows(asm.pred_ptr, asm.preds)
        return asm
    sizes = np.fromiter(map(len, groups), dtype=np.int64, count=n)
    starts = np.zeros(n, dtype=np.int64)            # per group: its first node's id ...
    np.cumsum(sizes[:-1], out=starts[1:])
    firsts = np.zeros(n, dtype=np.int64)            # ... and its first edge's position
    np.cumsum(edges[:-1], out=firsts[1:])
    base_of_gid = np.zeros(num_gids, dtype=np.int64)
    base_of_gid[np.fromiter(map(_GID, groups), dtype=np.int64, count=n)] = starts
    pred_ptr = np.empty(int(starts[-1] + sizes[-1]) + 1, dtype=np.int64)
    pred_ptr[0] = 0
    preds = np.empty(int(firsts[-1] + edges[-1]), dtype=np.int64)
    cumsum, take, add = np.cumsum, np.take, np.add
    for group, s, k, e, m in zip(groups, starts.tolist(), sizes.tolist(), firsts.tolist(),
                                 edges.tolist()):
        if k:
            ptr = pred_ptr[s + 1:s + 1 + k]
            cumsum(group.pred_count, out=ptr)
            if e:
                ptr += e
        if m:
            out = preds[e:e + m]
            take(base_of_gid, group.pred_gid, out=out)
            add(out, group.pred_idx, out=out)
            if sort and m >= SORT_IN_GROUP:
                sorted_rows(pred_ptr[s:s + k + 1] - e, out)
    if sort and len(preds) > 1 and int(edges.min()) < SORT_IN_GROUP:
        sorted_rows(pred_ptr, preds)        # the small groups' rows, in one pass
    return Assembled(pred_ptr, preds)


def resolve(gids, offsets, groups_per_run, run_sizes, pred_count, pred_gid, pred_idx,
            num_gids: int) -> Assembled:
    """Node ids for runs of groups (GroupRun) in program order, their arrays already
    joined: the groups' ids and offsets in their runs, how many groups and nodes each run
    has, and the predecessor arrays."""
    starts = np.zeros(len(run_sizes), dtype=np.int64)
    if len(run_sizes) > 1:
        np.cumsum(run_sizes[:-1], out=starts[1:])
    base_of_gid = np.zeros(num_gids, dtype=np.int64)
    base_of_gid[gids] = np.repeat(starts, groups_per_run) + offsets
    pred_ptr = np.zeros(len(pred_count) + 1, dtype=np.int64)
    np.cumsum(pred_count, out=pred_ptr[1:])
    preds = base_of_gid[pred_gid]
    preds += pred_idx               # (in place: one fresh array of all edges, not two)
    return Assembled(pred_ptr, preds)


def sorted_rows(ptr: np.ndarray, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR rows (flat[ptr[i]:ptr[i + 1]]) each in ascending order: `flat` sorted in place,
    only in the rows that are not (assemble's own arrays, a group's at a time). Arrays over
    the unsorted rows' entries only, not over all: Megatron @1,024 has 6.6M edges, 1.7M of
    them in 200,185 unsorted rows (a reduce's or a stamped read's), and the first touch of
    a fresh array costs more than the sort (sorted_rows_oracle, all rows at once: 0.8 s
    there, 0.085 s when its arrays' memory was touched before)."""
    if len(flat) < 2:
        return ptr, flat
    down = flat[1:] < flat[:-1]                 # an entry below the one before it ...
    starts = ptr[1:-1]
    down[starts[(starts > 0) & (starts < len(flat))] - 1] = False     # ... in its row
    if not down.any():
        return ptr, flat
    rows = np.unique(np.searchsorted(ptr, np.flatnonzero(down), side="right") - 1)
    first, sizes = ptr[rows], ptr[rows + 1] - ptr[rows]
    local = np.repeat(np.arange(len(rows), dtype=np.int64), sizes)      # row among them
    at = np.arange(len(local), dtype=np.int64)
    at += np.repeat(first - (np.cumsum(sizes) - sizes), sizes)          # position in flat
    values = flat[at]
    width = max(int(values.max()) + 1, 1)
    if values.min() >= 0 and len(rows) * width < 2 ** 62:
        # One key per value, rows apart (a sort of int64s, ~5x a lexsort's speed)
        key = local * width + values
        key.sort(kind="stable")         # (timsort: runs of rows in order; equal output)
        key -= local * width
        flat[at] = key
    else:
        flat[at] = values[np.lexsort((values, local))]
    return ptr, flat


def sorted_rows_oracle(ptr: np.ndarray, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """sorted_rows by sorting every row (a new array; the test oracle)."""
    if len(flat) > 1:
        row = np.repeat(np.arange(len(ptr) - 1, dtype=np.int64), np.diff(ptr))
        flat = flat[np.lexsort((flat, row))]
    return ptr, flat
