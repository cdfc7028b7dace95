"""A one-shot launch's task group made from its region columns, with arrays.

A planner that is never re-planned keeps, per launch, one column per region it touches:
[(preds, Red+ targets)] per access, as planning the region gave them, or as its class's
template gave them with the launch indices and nodes to move them by (RegionClasses.
next_entry; launchplan.LaunchPlan.columns). A column's task refs (launch, point) are read
once into arrays (`compile_column`: per access Python, once per template entry, which all
of a class's members share), and a member's are its template's with each launch index
replaced by its group id: one small table per column, no Python per access. The group's
predecessor arrays are those pairs, each point's own ref dropped, with its node refs and
state source, deduplicated per point: the pairs of the per-point sets Planner._build_tasks
makes (tests/taskrt/test_plan_columns.py), each node's in ascending order (the graph sorts
them: graphview.sorted_rows; the per-point sets' order follows node addresses anyway).
"""
from __future__ import annotations

from itertools import chain, compress, repeat
from operator import attrgetter, is_not

import numpy as np

from .launchplan import accesses_list
from .nodegroups import NodeGroup
from .taskgraph import TaskNode

_EMPTY = np.zeros(0, dtype=np.int64)
_WHERE = attrgetter("where")


class CompiledColumn:
    """One column's refs as arrays: task refs (point, template launch as an index into
    `launches`, point referred to), node refs (point, node) and Red+ targets (point,
    requirement index, targets)."""
    __slots__ = ("per_access", "pi", "launch_of", "q", "to_self", "launches", "node_pi",
                 "nodes", "targets")

    def __init__(self, accesses, per_access):
        self.per_access = per_access        # (kept: the cache is by its id)
        pis, ls, qs, node_pi, nodes, targets = [], [], [], [], [], []
        for (pi, k, _), (p, t) in zip(accesses, per_access):
            if p:
                for r in p:
                    if type(r) is tuple:
                        pis.append(pi)
                        ls.append(r[0])
                        qs.append(r[1])
                    elif r is not None:
                        node_pi.append(pi)
                        nodes.append(r)
            if t is not None:
                targets.append((pi, k, t))
        self.launches = sorted(set(ls))
        where = {l: j for j, l in enumerate(self.launches)}
        self.pi = np.array(pis, dtype=np.int64)
        self.launch_of = np.array([where[l] for l in ls], dtype=np.int64)
        self.q = np.array(qs, dtype=np.int64)
        self.to_self = self.q == self.pi        # (a ref to the same point: its own if
        self.node_pi = np.array(node_pi, dtype=np.int64)              # the launch is)
        self.nodes, self.targets = nodes, targets


def build_task_group(planner, key: tuple, lp, cache: dict | None) -> NodeGroup:
    """Launch key[0]'s task group from its columns (lp.columns): the nodes and
    predecessors Planner._build_tasks gives from per-point records. `cache`: compiled
    columns by id of their per-access list, for lists a class's members share (None: none
    kept)."""
    li = key[0]
    points = lp.points
    n = len(points)
    gids, gid_of = planner._gids, planner._gid
    pis, gs, qs = [], [], []
    targets: list | None = None
    for accesses, per_access, moves in lp.columns:
        shared = moves is not None and cache is not None
        column = cache.get(id(per_access)) if shared else None
        if column is None or column.per_access is not per_access:
            column = CompiledColumn(accesses_list(accesses), per_access)
            if shared:
                cache[id(per_access)] = column
        li_of, node_of = moves if moves is not None else (None, None)
        if column.launches:
            table, mine = [], []
            for l in column.launches:
                to = l if li_of is None else li_of[l]
                g = gids.get((to, None))
                if g is None:                   # (only this launch's own group is new)
                    g = gid_of((to, None))
                table.append(g)
                mine.append(to == li)
            g = np.array(table, dtype=np.int64)[column.launch_of]
            if any(mine):
                keep = ~(np.array(mine)[column.launch_of] & column.to_self)
                pis.append(column.pi[keep])
                gs.append(g[keep])
                qs.append(column.q[keep])
            else:
                pis.append(column.pi)
                gs.append(g)
                qs.append(column.q)
        if column.nodes:
            refs = column.nodes if node_of is None else map(node_of.__getitem__, column.nodes)
            m = len(column.nodes)
            where = np.fromiter(chain.from_iterable(map(_WHERE, refs)), dtype=np.int64,
                                count=2 * m)      # (group, index) pairs, flat
            pis.append(column.node_pi)
            gs.append(where[0::2])
            qs.append(where[1::2])
        for pi, k, t in column.targets:
            if targets is None:
                targets = [None] * n
            got = targets[pi]
            if got is None:
                got = targets[pi] = [None] * len(points[pi][2])
            got[k] = t
    srcs = lp.state_src                 # per point None or the task ref it takes state from
    if srcs.count(None) != n:
        has = np.fromiter(map(is_not, srcs, repeat(None)), dtype=bool, count=n)
        at = np.flatnonzero(has)
        lq = np.fromiter(chain.from_iterable(compress(srcs, has.tolist())), dtype=np.int64,
                         count=2 * len(at))
        ls, q = lq[0::2], lq[1::2]
        keep = (ls != li) | (q != at)      # (its own task is no predecessor)
        if len(at) and keep.any():
            at, ls, q = at[keep], ls[keep], q[keep]
            launches, row = np.unique(ls, return_inverse=True)
            table = np.array([gid_of((x, None)) for x in launches.tolist()], dtype=np.int64)
            pis.append(at)
            gs.append(table[row.reshape(-1)])
            qs.append(q)
    counts, pred_gid, pred_idx = _per_point(n, pis, gs, qs)
    # The nodes by C maps: a point without Red+ targets has (None,) * its requirements,
    # one tuple per number of them.
    colors, devices, reqs_of = zip(*points) if n else ((), (), ())
    lengths = list(map(len, reqs_of))
    nones = {k: (None,) * k for k in set(lengths)}
    if targets is None:
        per_point = map(nones.__getitem__, lengths)
    else:
        per_point = [nones[k] if t is None else tuple(t) for t, k in zip(targets, lengths)]
    nodes = list(map(TaskNode, repeat(-1), repeat(lp.launch), colors, devices, reqs_of,
                     per_point))
    return NodeGroup(key, gid_of(key), nodes, counts, pred_gid, pred_idx)


def _per_point(n: int, pis: list, gs: list, qs: list) -> tuple:
    """(pred_count, pred_gid, pred_idx) of the (point, group, index) triples: each point's
    distinct pairs, ascending."""
    if not pis:
        return np.zeros(n, dtype=np.int64), _EMPTY, _EMPTY
    pi, g, q = np.concatenate(pis), np.concatenate(gs), np.concatenate(qs)
    if not len(pi):
        return np.zeros(n, dtype=np.int64), _EMPTY, _EMPTY
    order = np.lexsort((q, g, pi))
    pi, g, q = pi[order], g[order], q[order]
    fresh = np.ones(len(pi), dtype=bool)
    fresh[1:] = (pi[1:] != pi[:-1]) | (g[1:] != g[:-1]) | (q[1:] != q[:-1])
    if not fresh.all():
        pi, g, q = pi[fresh], g[fresh], q[fresh]
    return np.bincount(pi, minlength=n).astype(np.int64), g, q
