"""A one-shot launch's task group made from its region columns, with arrays.

A planner that is never re-planned keeps, per launch, one column per region it touches:
[(preds, Red+ targets)] per access, as planning the region gave them, or as its class's
template gave them with the launch indices and nodes to move them by (RegionClasses.
next_entry; launchplan.LaunchPlan.columns). A column's task refs (launch, point) are read
once into arrays (`compile_column`: per access Python, once per template entry, which all
of a class's members share), and a member's are its template's with each launch index
replaced by its group id: a small table per launch (its columns' template launches), no
Python per access, and numpy calls per launch, not per column; its node refs likewise, by
the member's group id per template read group (CompiledColumn.node_places), not read
from each node. The group's
predecessor arrays are those pairs, each point's own ref dropped, with its node refs and
state source, deduplicated per point: the pairs of the per-point sets Planner._build_tasks
makes (tests/taskrt/test_plan_columns.py), each node's in ascending order (the graph sorts
them: nodegroups.sorted_rows; the per-point sets' order follows node addresses anyway).
A planner's groups are made in batches (PendingPreds): their task refs resolved, their node
refs' places and state sources read, and their pairs sorted and deduplicated for many
launches at once, before any group is read.
"""
from __future__ import annotations

from itertools import chain, compress, repeat
from operator import attrgetter, is_, is_not, itemgetter

import numpy as np

from .launchplan import accesses_list
from .nodegroups import NodeGroup
from .taskgraph import TaskNode

_EMPTY = np.zeros(0, dtype=np.int64)
_WHERE = attrgetter("where")
_FIRST, _SECOND = itemgetter(0), itemgetter(1)


class CompiledColumn:
    """One column's refs as arrays: task refs (point, template launch as an index into
    `launches`, point referred to), node refs (point, node) and Red+ targets (point,
    requirement index, targets)."""
    __slots__ = ("per_access", "pi", "launch_of", "q", "to_self", "launches", "node_pi",
                 "nodes", "targets", "places")

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
        self.places = None

    def node_places(self, node_of) -> tuple | None:
        """(group, index) arrays of the nodes the column's refs name: theirs, or with
        `node_of` (a class member's map from its template's nodes) those of the member's
        nodes, read per template group, not per node: a member's nodes of one template
        entry are its one read group's, at their template nodes' indices (stampedreads.py;
        a read group numbers an entry's nodes in order). None while a node has no place
        yet (its group not built). Read when the task group is built (refresh builds a
        launch's read groups first, and the launches before it)."""
        places = self.places
        if places is None:
            where = list(map(_WHERE, self.nodes))
            if None in where:
                return None
            rows: dict = {}         # template group id -> (row, a node of it)
            row = [rows.setdefault(w[0], (len(rows), r))[0] for w, r in zip(where, self.nodes)]
            places = self.places = (np.array(row, dtype=np.int64),
                                    np.array(list(map(_SECOND, where)), dtype=np.int64),
                                    np.array(list(rows), dtype=np.int64),
                                    [r for _, r in rows.values()])
        row, idx, gids, reps = places
        if node_of is not None:
            where = [node_of[r].where for r in reps]
            if None in where:
                return None
            gids = np.array(list(map(_FIRST, where)), dtype=np.int64)
        return gids[row], idx


def build_task_group(planner, key: tuple, lp, cache: dict | None,
                     pending: "PendingPreds | None" = None) -> NodeGroup:
    """Launch key[0]'s task group from its columns (lp.columns): the nodes and
    predecessors Planner._build_tasks gives from per-point records. `cache`: compiled
    columns by id of their per-access list, for lists a class's members share (None: none
    kept). `pending`: the group's predecessor arrays are left to it (None until its
    flush()), else made now."""
    li = key[0]
    points = lp.points
    n = len(points)
    gids, gid_of = planner._gids, planner._gid
    pis, gs, qs = [], [], []
    targets: list | None = None
    # The columns' task refs are gathered, and resolved by one table of group ids (per
    # column and template launch), for the whole launch at once; their node refs by one
    # C loop: a launch's numpy calls do not grow with its columns (regions).
    t_pi, t_row, t_base, t_q, t_self = [], [], [], [], []
    table, mine = [], []            # per (column, launch it refers to): group id, is it li
    node_pi, node_refs = [], []
    for accesses, per_access, moves in lp.columns:
        shared = moves is not None and cache is not None
        column = cache.get(id(per_access)) if shared else None
        if column is None or column.per_access is not per_access:
            column = CompiledColumn(accesses_list(accesses), per_access)
            if shared:
                cache[id(per_access)] = column
        li_of, node_of = moves[:2] if moves is not None else (None, None)
        shift = moves[2] if moves is not None and len(moves) > 2 else None
        if column.launches:
            base = len(table)
            for l in column.launches:
                to = l if li_of is None else li_of[l]
                g = gids.get((to, None))
                if g is None:                   # (only this launch's own group is new)
                    g = gid_of((to, None))
                table.append(g)
                mine.append(to == li)
            t_pi.append(column.pi)
            t_row.append(column.launch_of)
            t_base.append(base)
            t_q.append(column.q)
            t_self.append(column.to_self)
        if column.nodes:
            got = column.node_places(node_of) if shared else None
            if got is not None:             # (triples: no node object read per ref)
                pis.append(column.node_pi)
                gs.append(got[0])
                qs.append(got[1])
            else:
                node_pi.append(column.node_pi)
                node_refs.append(column.nodes if node_of is None else
                                 map(node_of.__getitem__, column.nodes))
        if column.targets:
            if targets is None:
                targets = []
            targets.append((column, shift, shared))
    tasks = TaskRefs(t_pi, t_row, t_base, t_q, t_self, table, mine)
    if table and pending is None:
        pi, g, q = tasks.resolved()
        pis.append(pi)
        gs.append(g)
        qs.append(q)
    node_refs = list(chain.from_iterable(node_refs)) if node_refs else None
    if node_refs and pending is None:
        where = np.fromiter(chain.from_iterable(map(_WHERE, node_refs)), dtype=np.int64,
                            count=2 * len(node_refs))      # (group, index) pairs, flat
        pis.append(_joined(node_pi))
        gs.append(where[0::2])
        qs.append(where[1::2])
    srcs = lp.state_src                 # per point None or the task ref it takes state from
    source = None                       # (the one launch they name, its group id: pending)
    if srcs.count(None) != n:
        launches = set(map(_FIRST, filter(None, srcs))) if pending is not None else ()
        if len(launches) == 1 and li not in launches:
            source = (srcs, gid_of((launches.pop(), None)))
        else:
            _state_triples(li, srcs, gid_of, pis, gs, qs)
    # The nodes by C maps: a point without Red+ targets has (None,) * its requirements,
    # one tuple per number of them.
    colors, devices, reqs_of = zip(*points) if n else ((), (), ())
    lengths = list(map(len, reqs_of))
    nones = {k: (None,) * k for k in set(lengths)}
    if targets is None:
        per_point = map(nones.__getitem__, lengths)
    else:
        per_point = _targets_per_point(targets, lengths, nones, cache)
    nodes = list(map(TaskNode, repeat(-1), repeat(lp.launch), colors, devices, reqs_of,
                     per_point))
    if pending is not None:
        group = NodeGroup(key, gid_of(key), nodes, None, None, None)
        pending.add(group, tasks, pis, gs, qs, (node_pi, node_refs) if node_refs else None,
                    source)
        return group
    return NodeGroup(key, gid_of(key), nodes, *_per_point(n, pis, gs, qs))


def _targets_per_point(columns: list, lengths: list, nones: dict, cache: dict | None
                       ) -> list:
    """Per point its Red+ targets (per requirement None or its targets; `nones[k]` for a
    point of k requirements without any), from `columns` [(compiled column, shift, kept
    in `cache`)] whose targets are [(point, requirement index, targets)], later columns'
    over earlier ones'. Where every column is kept and unshifted, the list is kept in
    `cache` too: a class's members whose columns are those (the template's targets, not
    moved) get the very list (its tuples shared: they are values)."""
    key = None
    if cache is not None and all(shared and shift is None for _, shift, shared in columns):
        key = ("targets", tuple([id(c) for c, _, _ in columns]))
        hit = cache.get(key)
        if hit is not None and hit[1] == lengths and \
                all(map(is_, hit[0], [c for c, _, _ in columns])):
            return hit[2]
    targets = [None] * len(lengths)
    for column, shift, _ in columns:
        for pi, k, t in column.targets:
            got = targets[pi]
            if got is None:
                got = targets[pi] = [None] * lengths[pi]
            got[k] = t if shift is None else shift.targets(t)
    out = [nones[k] if t is None else tuple(t) for t, k in zip(targets, lengths)]
    if key is not None:
        cache[key] = ([c for c, _, _ in columns], lengths, out)
    return out


def _state_triples(li: int, srcs: list, gid_of, pis: list, gs: list, qs: list) -> None:
    """Append the (point, group, index) triples of a launch's state sources (per point None
    or a task ref), each point's own task dropped."""
    n = len(srcs)
    has = np.fromiter(map(is_not, srcs, repeat(None)), dtype=bool, count=n)
    at = np.flatnonzero(has)
    lq = np.fromiter(chain.from_iterable(compress(srcs, has.tolist())), dtype=np.int64,
                     count=2 * len(at))
    ls, q = lq[0::2], lq[1::2]
    keep = (ls != li) | (q != at)      # (its own task is no predecessor)
    if len(at) and keep.any():
        at, ls, q = at[keep], ls[keep], q[keep]
        # Each source launch's group id once, ascending (a backward's points take state
        # from one launch: a dict of one, not np.unique's sort and inverse).
        ls = ls.tolist()
        table = {x: gid_of((x, None)) for x in sorted(set(ls))}
        pis.append(at)
        gs.append(np.fromiter(map(table.__getitem__, ls), dtype=np.int64, count=len(ls)))
        qs.append(q)


class TaskRefs:
    """Columns' task refs, to be resolved into (point, group, index) triples: per column
    its arrays of point, row (of `table`, less the column's `base`), point referred to and
    whether that is the point itself; per row the group id and whether it is the task
    group being built (whose refs to the point itself are no predecessors)."""
    __slots__ = ("pi", "row", "base", "q", "to_self", "table", "mine")

    def __init__(self, pi: list, row: list, base: list, q: list, to_self: list, table: list,
                 mine: list):
        self.pi, self.row, self.base, self.q, self.to_self = pi, row, base, q, to_self
        self.table, self.mine = table, mine

    def extend(self, other: "TaskRefs", rows: int) -> None:
        """Append `other`'s refs, its rows after the `rows` of ours."""
        self.pi += other.pi
        self.row += other.row
        self.base += [b + rows for b in other.base]
        self.q += other.q
        self.to_self += other.to_self
        self.table += other.table
        self.mine += other.mine

    def resolved(self, pi_base: list | None = None) -> tuple:
        """(point, group, index) arrays of the refs, each point's own ref dropped (points
        numbered from `pi_base`, one per column, if given)."""
        row = np.concatenate(self.row)
        lengths = np.fromiter(map(len, self.row), dtype=np.int64, count=len(self.row))
        if any(self.base):
            row += np.repeat(np.array(self.base, dtype=np.int64), lengths)
        pi, q = _joined(self.pi), _joined(self.q)
        if pi_base is not None:
            pi = pi + np.repeat(np.array(pi_base, dtype=np.int64), lengths)
        g = np.array(self.table, dtype=np.int64)[row]
        if any(self.mine):
            keep = ~(np.array(self.mine)[row] & _joined(self.to_self))
            pi, g, q = pi[keep], g[keep], q[keep]
        return pi, g, q


def _joined(arrays: list):
    """One array of `arrays` (the one itself when alone)."""
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def _per_point(n: int, pis: list, gs: list, qs: list) -> tuple:
    """(pred_count, pred_gid, pred_idx) of the (point, group, index) triples: each point's
    distinct pairs, ascending. Sorted as one int64 key where the three fit in it (np.sort
    of one key is ~10x faster than np.lexsort of three at 60k triples, and np.unique of
    it ~25x slower than a sort and a diff), else by lexsort."""
    if not pis:
        return np.zeros(n, dtype=np.int64), _EMPTY, _EMPTY
    pi, g, q = np.concatenate(pis), np.concatenate(gs), np.concatenate(qs)
    if not len(pi):
        return np.zeros(n, dtype=np.int64), _EMPTY, _EMPTY
    span_q = int(q.max()) + 1
    span = (int(g.max()) + 1) * span_q
    if n * span < KEY_LIMIT:
        # (timsort: the keys come in sorted runs, a column's or a launch's: at Megatron
        # GPT@1,024 3.6M keys 0.15 -> 0.02 s against the default introsort; equal output)
        key = np.sort(pi * span + g * span_q + q, kind="stable")
        if len(key) > 1:
            fresh = np.empty(len(key), dtype=bool)
            fresh[0] = True
            np.not_equal(key[1:], key[:-1], out=fresh[1:])
            if not fresh.all():
                key = key[fresh]
        pi, rest = np.divmod(key, span)
        g, q = np.divmod(rest, span_q)
    else:
        order = np.lexsort((q, g, pi))
        pi, g, q = pi[order], g[order], q[order]
        fresh = np.ones(len(pi), dtype=bool)
        fresh[1:] = (pi[1:] != pi[:-1]) | (g[1:] != g[:-1]) | (q[1:] != q[:-1])
        if not fresh.all():
            pi, g, q = pi[fresh], g[fresh], q[fresh]
    return np.bincount(pi, minlength=n).astype(np.int64), g, q


KEY_LIMIT = 1 << 62         # (_per_point's one key: point * span + group * span_q + index)


class PendingPreds:
    """Task groups whose predecessor arrays are still to be made: their (point, group,
    index) triples, kept until flush(), which makes every group's arrays by one
    `_per_point` over all of them (each group's points numbered after the groups' before
    it, so each point's pairs are its own, sorted and deduplicated as alone). A one-shot
    plan builds ~1,300 task groups of ~50 triples each at Inception @16: per group,
    _per_point's dozen numpy calls were ~15-25 us; per flush they are the same calls on
    the whole. Flushed when `LIMIT` triples are kept (the sort's temporaries stay small)
    and before any group is read (Planner.launch_groups)."""
    LIMIT = 1 << 17
    __slots__ = ("groups", "tasks", "task_offsets", "pis", "gs", "qs", "offsets", "points",
                 "size", "node_pi", "node_offsets", "node_refs", "srcs", "src_first",
                 "src_gid")

    def __init__(self):
        self.groups: list[NodeGroup] = []
        self.tasks = TaskRefs([], [], [], [], [], [], [])
        self.task_offsets: list[int] = []   # per column in tasks: its group's first point
        self.pis, self.gs, self.qs = [], [], []
        self.offsets: list[int] = []        # per array in pis: its group's first point
        self.node_pi: list = []             # node refs: per column its points ...
        self.node_offsets: list[int] = []   # ... and its group's first point
        self.node_refs: list = []           # the nodes referred to, flat
        self.srcs: list = []                # per group with state sources: its list, ...
        self.src_first: list[int] = []      # ... its first point ...
        self.src_gid: list[int] = []        # ... and the group id of the launch they name
        self.points = self.size = 0         # points and triples kept

    def __bool__(self) -> bool:
        return bool(self.groups)

    def add(self, group: NodeGroup, tasks: TaskRefs, pis: list, gs: list, qs: list,
            nodes: tuple | None = None, source: tuple | None = None) -> None:
        """`group`'s task refs and other triples (arrays _per_point would take); `nodes`:
        its node refs (per column the points, and the nodes referred to, flat; their
        places are read at the flush); `source`: its state sources (per point None or a
        task ref, all of one launch, none its own) and that launch's group id."""
        self.groups.append(group)
        if tasks.pi:
            self.tasks.extend(tasks, len(self.tasks.table))
            self.task_offsets += repeat(self.points, len(tasks.pi))
            self.size += sum(map(len, tasks.pi))
        if nodes is not None:
            self.node_pi += nodes[0]
            self.node_offsets += repeat(self.points, len(nodes[0]))
            self.node_refs += nodes[1]
            self.size += len(nodes[1])
        if source is not None:
            self.srcs.append(source[0])
            self.src_first.append(self.points)
            self.src_gid.append(source[1])
            self.size += len(source[0])
        self.pis += pis
        self.gs += gs
        self.qs += qs
        self.offsets += repeat(self.points, len(pis))
        self.points += len(group.nodes)
        self.size += sum(map(len, pis))
        if self.size >= self.LIMIT:
            self.flush()

    def flush(self) -> None:
        """Give the kept groups their predecessor arrays (views of the flush's arrays)."""
        groups, pis, gs, qs = self.groups, self.pis, self.gs, self.qs
        if not groups:
            return
        if pis:
            pis = [_offset(pis, self.offsets)]
        if self.tasks.pi:
            pi, g, q = self.tasks.resolved(self.task_offsets)
            pis, gs, qs = pis + [pi], gs + [g], qs + [q]
        if self.node_refs:
            refs = self.node_refs
            where = np.fromiter(chain.from_iterable(map(_WHERE, refs)), dtype=np.int64,
                                count=2 * len(refs))        # (group, index) pairs, flat
            pis, gs, qs = (pis + [_offset(self.node_pi, self.node_offsets)],
                           gs + [where[0::2]], qs + [where[1::2]])
        if self.srcs:
            pis, gs, qs = _sources(self.srcs, self.src_first, self.src_gid, pis, gs, qs)
        counts, gid, idx = _per_point(self.points, pis, gs, qs)
        sizes = np.fromiter(map(len, map(_NODES, groups)), dtype=np.int64, count=len(groups))
        first = np.zeros(len(groups) + 1, dtype=np.int64)     # per group its first point
        np.cumsum(sizes, out=first[1:])
        ends = np.zeros(self.points + 1, dtype=np.int64)      # per point its pairs' end
        np.cumsum(counts, out=ends[1:])
        at = ends[first].tolist()                              # per group its first pair
        first = first.tolist()
        for k, group in enumerate(groups):
            a, b = at[k], at[k + 1]
            group.pred_count = counts[first[k]:first[k + 1]]
            group.pred_gid, group.pred_idx = gid[a:b], idx[a:b]
        self.__init__()


_NODES = attrgetter("nodes")


def _offset(pis: list, offsets: list):
    """One array of the points `pis`, each array's moved by its offset."""
    lengths = np.fromiter(map(len, pis), dtype=np.int64, count=len(pis))
    pi = np.concatenate(pis)
    pi += np.repeat(np.array(offsets, dtype=np.int64), lengths)
    return pi


def _sources(srcs: list, first: list, gids: list, pis: list, gs: list, qs: list) -> tuple:
    """pis, gs, qs with the triples of the groups' state sources added: per group its list
    (per point None or a task ref of one launch), its first point and that launch's group
    id."""
    lengths = np.fromiter(map(len, srcs), dtype=np.int64, count=len(srcs))
    flat = list(chain.from_iterable(srcs))
    has = np.fromiter(map(is_not, flat, repeat(None)), dtype=bool, count=len(flat))
    at = np.flatnonzero(has)
    lq = np.fromiter(chain.from_iterable(compress(flat, has.tolist())), dtype=np.int64,
                     count=2 * len(at))
    starts = np.zeros(len(srcs), dtype=np.int64)        # per group its first in flat
    np.cumsum(lengths[:-1], out=starts[1:])
    shift = np.repeat(np.array(first, dtype=np.int64) - starts, lengths)
    g = np.repeat(np.array(gids, dtype=np.int64), lengths)
    return pis + [at + shift[at]], gs + [g[at]], qs + [lq[1::2]]
