"""Read node lists moved from another region's plan, with their groups made by arrays.

A re-plannable planner moves a region plan to another region alike (regionclasses.stamp:
a remembered plan taken by another region of its key, a slab's class plan moved along a
dimension, slabplans.py): every read node is remade for the new region and launches, node
for node, with the same kinds, devices and volumes, and its predecessor refs are the
template's moved one to one (a task of the template's launch at log position j: the same
point of the new plan's launch at j; a read node: the new node at the same place). So the
template's refs are read once per template entry (`EntryMoves`: per ref whether it is a
task's, its log position and its point or index) and a moved list's read group
(`MovedReads.group`) is those arrays with each log position's group id looked up once, as
stampedreads.py does for a one-shot planner: no Python per ref and no moved ref set per
node. A moved list keeps the tuples (node, None, staged): its refs are its entry's.

The pairs are those Planner._build_reads gives from moved refs (distinct there by a set,
here because moving is one to one), in another order within a node; node ids, times and the
sorted graph are the same (tests/strategy/test_moved_groups.py compares the groups with the
moved refs resolved node by node). The group also names its entry (NodeGroup.template): its
nodes are the entry's template nodes moved, so the simulator relabels the template's arrays
instead of reading each node (strategy/readgroups.py).
"""
from __future__ import annotations

import numpy as np

from .nodegroups import NodeGroup

_EMPTY = np.zeros(0, dtype=np.int64)
# Off: stamped read lists keep moved ref sets and are built node by node (the oracle of
# tests/strategy/test_moved_groups.py; the graph is the same).
MOVED_READS = True


class EntryMoves:
    """One template entry's read nodes (`items`, a plain [(node, refs, staged)] list) with
    their refs compiled: per node how many, per ref whether it is a task's, its log
    position in the template's plan (of the launch, or of the node's entry) and its point
    or index; the log positions referred to by tasks and by nodes, ascending."""
    __slots__ = ("items", "count", "is_task", "pos", "idx", "task_pos", "node_pos")

    def __init__(self, items, count, is_task, pos, idx, task_pos, node_pos):
        self.items = items
        self.count, self.is_task, self.pos, self.idx = count, is_task, pos, idx
        self.task_pos, self.node_pos = task_pos, node_pos


class MovedReads(list):
    """A read node list [(node, None, staged)] moved from `entry`'s template nodes, for
    region `name` over launches `lis` (aligned with the positions of the template's log)."""
    __slots__ = ("entry", "lis", "name")

    def group(self, planner, key: tuple) -> NodeGroup:
        """The read group of `key` (this list's launch, the region): Planner._build_reads
        of the moved refs, by arrays."""
        gid = planner._gid(key)
        nodes = [item[0] for item in self]
        for idx, node in enumerate(nodes):
            node.where = (gid, idx)
        e = self.entry
        if len(e.pos):
            lis, gid_of, name = self.lis, planner._gid, self.name
            tasks = np.zeros(len(lis), dtype=np.int64)
            for j in e.task_pos:
                tasks[j] = gid_of((lis[j], None))
            if e.node_pos:
                reads = np.zeros(len(lis), dtype=np.int64)
                for j in e.node_pos:
                    reads[j] = gid_of((lis[j], name))
                pred_gid = np.where(e.is_task, tasks[e.pos], reads[e.pos])
            else:
                pred_gid = tasks[e.pos]
            pred_idx = e.idx
        else:
            pred_gid = pred_idx = _EMPTY
        staged = [item[2] for item in self]
        if all(st is None for st in staged):
            staged = None
        return NodeGroup(key, gid, nodes, e.count, pred_gid, pred_idx, staged, None, e)


    def refs(self, items_of) -> list[set]:
        """Per node its moved refs as a plain list holds them (a set of task refs (launch,
        point) and read nodes), `items_of(li)` giving the region's read list of launch li:
        for oracles and for moving a plan ref by ref."""
        e, lis = self.entry, self.lis
        out, at = [], 0
        pos, idx, is_task = e.pos.tolist(), e.idx.tolist(), e.is_task.tolist()
        for n in e.count.tolist():
            out.append({(lis[pos[r]], idx[r]) if is_task[r] else items_of(lis[pos[r]])[idx[r]][0]
                        for r in range(at, at + n)})
            at += n
        return out


def compile_plan(plan) -> list | None:
    """Per entry of RegionPlan `plan`: its EntryMoves where the entry is a plain list, the
    list itself where it is a MovedReads, None where it has no nodes; None for the whole
    plan where a ref names a launch or node outside it (then it is moved ref by ref)."""
    log_pos = {li: j for j, li in enumerate(plan.lis)}
    where: dict = {}            # node -> (entry, index)
    for j, items in enumerate(plan.nodes):
        if items:
            for idx, item in enumerate(items):
                where[item[0]] = (j, idx)
    out = []
    for items in plan.nodes:
        if not items or type(items) is MovedReads:
            out.append(items or None)
            continue
        got = _compile(items, log_pos, where)
        if got is None:
            return None
        out.append(got)
    return out


def _compile(items: list, log_pos: dict, where: dict) -> EntryMoves | None:
    count, is_task, pos, idx = [], [], [], []
    task_pos, node_pos = set(), set()
    for node, refs, _ in items:
        n = 0
        for r in refs:
            if r is None or r is node:
                continue
            if type(r) is tuple:
                j = log_pos.get(r[0])
                if j is None:
                    return None
                is_task.append(True)
                idx.append(r[1])
                task_pos.add(j)
            else:
                got = where.get(r)
                if got is None:
                    return None
                j = got[0]
                is_task.append(False)
                idx.append(got[1])
                node_pos.add(j)
            pos.append(j)
            n += 1
        count.append(n)
    return EntryMoves(items, np.array(count, dtype=np.int64), np.array(is_task, dtype=bool),
                      np.array(pos, dtype=np.int64), np.array(idx, dtype=np.int64),
                      sorted(task_pos), sorted(node_pos))

