"""The TaskGraph object view of a planner's node groups (Planner.finish): node ids in group
order, sorted predecessor and successor lists, and each region's buffers and valid pieces;
for a one-shot plan also the columns of its nodes that are not tasks and every node's kind
code, made per group (groupcolumns.py). Executors, traces and tests run from it; the search
never builds it (nodegroups.py; its explanations read the groups: strategy/explain.py)."""
from __future__ import annotations

import weakref
from collections import defaultdict, deque
from itertools import repeat
from operator import attrgetter, eq, is_

from .groupcolumns import planned_columns, staged_inputs
from .nodegroups import assemble
from .smallpages import small_pages
from .taskgraph import TASK, ReduceInput, TaskGraph

_launch_of = attrgetter("launch")
_owner_of = attrgetter("owner")


def graph_of(planner, release: bool = False) -> TaskGraph:
    """Planner.finish(release). (With numpy's huge-page advice off, as the full simulation
    runs: smallpages.py. The graph's arrays of millions of entries are fresh memory; at
    Megatron GPT@1,024 their first touch in 2 MiB pages, compacted for by the kernel, was
    ~0.5 s of system time in sorted_rows and planned_columns, and varied run to run.)"""
    with small_pages():
        return _graph_of(planner, release)


def _graph_of(planner, release: bool) -> TaskGraph:
    groups = planner.groups()
    asm = assemble(groups, len(planner._gids), sort=True)
    g = TaskGraph(planner.machine)
    g.regions = dict(planner.regions)
    _region_infos(planner, g)
    if release:
        _release(planner)
    nodes, launch_nodes = g.nodes, g.launch_nodes
    nid = 0
    starts = []
    for group in groups:
        members = group.nodes
        starts.append(nid)
        nid = _number(members, nid, launch_nodes)
        nodes += members
    for group, start in zip(groups, starts):
        if group.columns is not None and group.columns.relative:
            staged_inputs(group, start)         # (a class member's: from its columns)
        elif group.staged is not None:
            for node, staged in zip(group.nodes, group.staged):
                if staged is not None:
                    node.inputs = tuple([
                        ReduceInput(i.source, i.rect, c.id) if c is not None else i
                        for i, c in zip(node.inputs, staged)])
    if release:
        # (a one-shot plan's: the simulator takes them instead of reading the nodes)
        g.other_columns, g.node_kinds = planned_columns(groups, starts, nodes, g.regions)
    del groups
    g.set_edges(asm.pred_ptr, asm.preds)
    return g


def _number(members: list, nid: int, launch_nodes: dict) -> int:
    """Give a group's nodes ids from `nid` on and list them under their owner (a task's
    launch, a copy's or reduce's owner) in launch_nodes; returns the next id. A group's
    nodes mostly have one owner (one launch's tasks, or its reads of one region): then
    its ids are listed at once."""
    if not members:
        return nid
    end = nid + len(members)
    first = members[0]
    try:
        if first.kind is TASK:
            launch = first.launch
            one = all(map(is_, map(_launch_of, members), repeat(launch)))
            owner = launch.name
        else:
            owner = first.owner
            one = all(map(eq, map(_owner_of, members), repeat(owner)))
    except AttributeError:          # (tasks and other nodes in one group: by node)
        one = False
    if not one:
        for node in members:
            node.id = nid
            owner = node.launch.name if node.kind is TASK else node.owner
            ids_of_owner = launch_nodes.get(owner)
            if ids_of_owner is None:
                launch_nodes[owner] = [nid]
            else:
                ids_of_owner.append(nid)
            nid += 1
        return nid
    # (setattr by a C map: ~half a Python loop's time over 2.6M nodes)
    deque(map(setattr, members, repeat("id"), range(nid, end)), maxlen=0)
    ids_of_owner = launch_nodes.get(owner)
    if ids_of_owner is None:
        launch_nodes[owner] = list(range(nid, end))
    else:
        ids_of_owner += range(nid, end)
    return end


def _region_infos(planner, g: TaskGraph) -> None:
    """Each region's buffers and valid pieces, into the graph (for finish())."""
    for name, rp in planner.planners.items():
        info = planner._region_info.get(name) if name not in planner._dirty else None
        if info is None:
            if rp is None:              # (a one-shot planner makes a region's planner lazily)
                rp = planner._planner(name)
            info = planner._region_info[name] = region_info(planner, rp)
        instance, partial, initial, final_valid, pend = info
        g.instance_rects.add_region(name, instance)
        g.partial_rects.add_region(name, partial)
        if initial:
            g.initial_valid[name] = list(initial)
        if final_valid or instance or partial or initial or pend:
            # (else no launch uses the region any more since a replace(): a full plan
            # does not know it; e.g. batch norm's sums under a config that splits no
            # sample dim)
            g.final_valid[name] = list(final_valid)
        if pend:
            g.final_pending[name] = list(pend)
    planner._dirty.clear()
    if planner.replannable:
        planner._frozen_info.clear()


def region_info(planner, rp) -> tuple:
    """What finish() copies of a region's RegionPlanner `rp` into the graph: its buffers'
    (device, rect) pairs (instance, partial), initial pieces, final valid pieces and pending
    sums. Regions planned alike share a frozen planner (regionclasses.py; never planned
    further): they share one tuple, made once (`planner._frozen_info`, by the planner's id
    with a weak reference to it: the id of a planner dropped since may be reused), and the
    graph's BufferRects one list."""
    frozen = rp in planner._frozen
    if frozen:
        known = planner._frozen_info.get(id(rp))
        if known is not None and known[0]() is rp:
            return known[1]
    info = (list(rp.instance_rects.items()), list(rp.partial_rects.items()), list(rp.initial),
            rp.final_valid(), rp.final_pending())
    if frozen:
        planner._frozen_info[id(rp)] = (weakref.ref(rp), info)
    return info


def _release(planner) -> None:
    """Drop what only planning more or re-planning needs (finish(release=True)): the
    region planners, logs, read node lists, per-launch preds and targets, and the node
    groups (the graph's nodes are the groups' nodes). The planner is unusable after."""
    planner.planners, planner.region_nodes, planner.log = {}, {}, defaultdict(list)
    planner._groups, planner._read_groups, planner._tasks, planner._task_memo = {}, {}, {}, {}
    planner._region_info = {}
    planner._frozen_info, planner._moved_info = {}, {}
    for lp in planner.plans:
        lp.task_preds = lp.task_targets = lp.points = lp.refs = lp.columns = None
