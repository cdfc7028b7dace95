"""A class member's read nodes, stamped from its template, with their groups made by arrays.

A planner that is never re-planned (plan()) gives each member of a class of regions planned
alike (regionclasses.py) new read nodes per log entry, the template's with the member's
region and launch names. Each template node's predecessor refs are of two kinds: a task
(template launch, point), moved to the member's launch at the same place in its log, and a
read node of the same region (template entry, index in it), which is the member's node at
the same place. So the refs are read once per template (`TemplateReads`: per entry, arrays
of kind, log position and index, each node's own ref and None dropped), and a member's read
group (`StampedReads.group`) is those arrays with each log position's group id looked up
once: no Python per ref, and no moved ref sets per node (regionclasses.stamp_nodes, which
the re-plannable and slab paths keep, is this module's test oracle:
tests/taskrt/test_stamped_reads.py). The pairs are those Planner._build_reads gives from the
moved refs (distinct there by a set; distinct here because moving is one to one), in
another order within a node: the graph sorts each node's predecessors
(nodegroups.sorted_rows). A template entry's nodes are also read once as columns
(othercolumns.EntryColumns), which every member's group hands to the graph's columns.
"""
from __future__ import annotations

from itertools import groupby, repeat
from operator import attrgetter, itemgetter

import numpy as np

from .othercolumns import EntryColumns
from .nodegroups import NodeGroup
from .taskgraph import (ALLREDUCE, COPY, REDUCE, AllReduceNode, CopyNode, ReduceInput,
                        ReduceNode)

_EMPTY = np.zeros(0, dtype=np.int64)


class EntryRefs:
    """One template entry's read nodes' refs: per node how many, then per ref whether it is
    a task's, its log position (of the launch, or of the node's entry) and its point or
    index; and the staging copies behind each reduce's inputs, as flat node positions."""
    __slots__ = ("count", "is_task", "pos", "idx", "task_pos", "node_pos", "staged", "columns",
                 "named")

    def __init__(self, count, is_task, pos, idx, task_pos: list, node_pos: list, staged,
                 columns=None):
        self.count, self.is_task, self.pos, self.idx = count, is_task, pos, idx
        # The log positions referred to, ascending (by tasks, by nodes); found as the refs
        # are read (_compile), not by np.unique (~6 us a call on an entry's few refs).
        self.task_pos, self.node_pos = task_pos, node_pos
        self.staged = staged        # None, or per node None / [flat position or -1]
        # The entry's othercolumns.EntryColumns (its staged copies by index in the entry),
        # or None (read from a member's nodes).
        self.columns = columns
        # The indices of the entry's nodes that the template's tasks name (TemplateReads):
        # the only ones whose place (node.where) is asked, by taskcolumns.py.
        self.named: list[int] = []


class TemplateReads:
    """A class template's read nodes (RegionPlan `plan`) with their refs compiled per entry."""
    __slots__ = ("plan", "entries", "runs", "named", "named_pos")

    def __init__(self, plan):
        self.plan = plan
        log_pos = {li: j for j, li in enumerate(plan.lis)}
        where: dict = {}            # template node -> (flat position, entry, index)
        flat = 0
        for j, items in enumerate(plan.nodes):
            if items is not None:
                for idx, item in enumerate(items):
                    where[item[0]] = (flat, j, idx)
                    flat += 1
        self.entries = [None if items is None else _compile(items, log_pos, where)
                        for items in plan.nodes]
        # Per entry its nodes' runs of one kind, each (class, the fields after id, owner and
        # region as columns): a member's nodes are made by one map per run. (Read once: a
        # read node's fields are set when it is made; only graph_of, after planning, gives
        # a reduce's inputs their copies' ids.)
        self.runs = [None if items is None else _runs(items) for items in plan.nodes]
        # The template's nodes its tasks' preds name (the node refs in its accesses), and
        # their flat positions: the only ones a member's node map is asked for.
        named = {id(r): r for per_access in plan.accesses for p, _ in per_access if p
                 for r in p if r is not None and type(r) is not tuple}
        self.named = list(named.values())
        self.named_pos = [where[r][0] for r in self.named]
        for r in self.named:            # (their places in their entries: EntryRefs.named)
            _, j, idx = where[r]
            self.entries[j].named.append(idx)

    def stamp(self, region, owners: list[str], lis: list[int], shift=None
              ) -> tuple[list, dict]:
        """A member's read nodes: per entry a StampedReads (or None where the template has
        no read nodes), for `region` over launches `lis` (owners: their names); and the map
        from the template's nodes its tasks name to the member's (taskcolumns.py moves task
        refs by it). `shift`: a function moving each rect (of nodes and reduction inputs),
        for a member of other extents along whole dimensions (regionshapes.py); its groups
        then read their columns from their nodes."""
        flat: list = []
        per_entry = []
        for runs, owner in zip(self.runs, owners):
            if runs is None:
                per_entry.append(None)
                continue
            nodes = []
            for cls, columns in runs:
                if shift is not None:
                    columns = _shifted(cls, columns, shift)
                nodes += map(cls, repeat(-1), repeat(owner), repeat(region), *columns)
            flat += nodes
            per_entry.append(nodes)
        lis = tuple(lis)
        out = [None if nodes is None else
               StampedReads(nodes, refs, lis, region.name, flat, shift is None)
               for nodes, refs in zip(per_entry, self.entries)]
        return out, dict(zip(self.named, map(flat.__getitem__, self.named_pos)))


class StampedReads:
    """A member's read nodes of one log entry, to be made into their NodeGroup."""
    __slots__ = ("nodes", "refs", "lis", "name", "flat", "columns")

    def __init__(self, nodes: list, refs: EntryRefs, lis: tuple, name: str, flat: list,
                 columns: bool = True):
        self.nodes, self.refs, self.lis, self.name, self.flat = nodes, refs, lis, name, flat
        # The template entry's columns (its nodes' volumes), unless the rects were moved.
        self.columns = refs.columns if columns else None

    def __len__(self) -> int:
        return len(self.nodes)

    def group(self, planner, key: tuple) -> NodeGroup:
        """The read group of `key` (this entry's launch, the region): Planner._build_reads
        of the moved refs."""
        gid = planner._gid(key)
        nodes = self.nodes
        for idx in self.refs.named:
            nodes[idx].where = (gid, idx)
        refs = self.refs
        if len(refs.pos):
            lis, gids, gid_of, name = self.lis, planner._gids, planner._gid, self.name
            table = np.zeros(len(lis), dtype=np.int64)
            for j in refs.task_pos:
                g = gids.get((lis[j], None))
                table[j] = gid_of((lis[j], None)) if g is None else g
            node_table = np.zeros(len(lis), dtype=np.int64)
            for j in refs.node_pos:
                node_table[j] = gid_of((lis[j], name))
            pred_gid = np.where(refs.is_task, table[refs.pos], node_table[refs.pos])
            pred_idx = refs.idx
        else:
            pred_gid = pred_idx = _EMPTY
        staged = None
        if refs.staged is not None and self.columns is None:     # (else graph_of reads the
            flat = self.flat                                      # columns: groupcolumns.py)
            staged = [None if s is None else [None if p < 0 else flat[p] for p in s]
                      for s in refs.staged]
        return NodeGroup(key, gid, nodes, refs.count, pred_gid, pred_idx, staged, self.columns)


# Per kind of read node: its class and its fields after (id, owner, region), in order.
_FIELDS = {COPY: (CopyNode, ("rect", "src", "dst", "reduction", "from_partial")),
           REDUCE: (ReduceNode, ("rect", "device", "inputs")),
           ALLREDUCE: (AllReduceNode, ("rect", "devices", "in_partial"))}


def _shifted(cls, columns: list, shift) -> list:
    """A run's columns with the rects moved by `shift` (a reduce's inputs' too)."""
    columns = [list(map(shift, columns[0]))] + columns[1:]
    if cls is ReduceNode:
        columns[2] = [tuple([ReduceInput(i.source, shift(i.rect), i.copy_id) for i in inputs])
                      for inputs in columns[2]]
    return columns


def _runs(items: list) -> list:
    """One template entry's nodes (items [(node, refs, staged)]) as runs of one kind, in
    order: (class, [column per field after id, owner and region])."""
    out = []
    for kind, run in groupby(map(itemgetter(0), items), key=attrgetter("kind")):
        cls, fields = _FIELDS[kind]
        run = list(run)
        out.append((cls, [list(map(attrgetter(f), run)) for f in fields]))
    return out


def _compile(items: list, log_pos: dict, where: dict) -> EntryRefs:
    """EntryRefs of one template entry's items [(node, refs, staged)]."""
    count, is_task, pos, idx = [], [], [], []
    task_pos, node_pos = set(), set()
    staged_out: list | None = None
    staged_at: list | None = []     # per node None or per input its copy's index in the entry
    for k, (node, refs, staged) in enumerate(items):
        n = 0
        for r in refs:
            if r is None or r is node:
                continue
            if type(r) is tuple:
                j = log_pos[r[0]]
                is_task.append(True)
                pos.append(j)
                idx.append(r[1])
                task_pos.add(j)
            else:
                _, j, i = where[r]
                is_task.append(False)
                pos.append(j)
                idx.append(i)
                node_pos.add(j)
            n += 1
        count.append(n)
        if staged is None:
            if staged_at is not None:
                staged_at.append(None)
            continue
        if staged_out is None:
            staged_out = [None] * len(items)
        staged_out[k] = [-1 if c is None else where[c][0] for c in staged]
        # (a reduce's staged copies are made with it, in its entry: else no columns)
        if staged_at is not None:
            if any(c is not None and where[c][1] != where[node][1] for c in staged):
                staged_at = None
            else:
                staged_at.append([-1 if c is None else where[c][2] for c in staged])
    columns = EntryColumns(list(map(itemgetter(0), items)), staged_at) \
        if staged_at is not None else None
    return EntryRefs(np.array(count, dtype=np.int64), np.array(is_task, dtype=bool),
                     np.array(pos, dtype=np.int64), np.array(idx, dtype=np.int64),
                     sorted(task_pos), sorted(node_pos), staged_out, columns)
