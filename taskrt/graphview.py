"""The TaskGraph object view of a planner's node groups (Planner.finish): node ids in group
order, sorted predecessor and successor lists, and each region's buffers and valid pieces.
Executors, traces and tests run from it; the search never builds it (nodegroups.py)."""
from __future__ import annotations

from collections import defaultdict

from .nodegroups import assemble
from .taskgraph import TASK, ReduceInput, TaskGraph


def graph_of(planner, release: bool = False) -> TaskGraph:
    """Planner.finish(release)."""
    groups = planner.groups()
    asm = assemble(groups, len(planner._gids))
    g = TaskGraph(planner.machine)
    g.regions = dict(planner.regions)
    _region_infos(planner, g)
    if release:
        _release(planner)
    nodes, launch_nodes = g.nodes, g.launch_nodes
    nid = 0
    for group in groups:
        for node in group.nodes:
            node.id = nid
            nodes.append(node)
            owner = node.launch.name if node.kind is TASK else node.owner
            ids_of_owner = launch_nodes.get(owner)
            if ids_of_owner is None:
                launch_nodes[owner] = [nid]
            else:
                ids_of_owner.append(nid)
            nid += 1
    for group in groups:
        if group.staged is not None:
            for node, staged in zip(group.nodes, group.staged):
                if staged is not None:
                    node.inputs = tuple(
                        ReduceInput(i.source, i.rect, c.id) if c is not None else i
                        for i, c in zip(node.inputs, staged))
    del groups
    ptr, flat = asm.pred_ptr.tolist(), asm.preds.tolist()
    del asm
    all_preds = g.preds
    succs = g.succs = [[] for _ in range(nid)]
    for i in range(nid):
        ps = sorted(flat[ptr[i]:ptr[i + 1]])
        all_preds.append(ps)
        for p in ps:
            succs[p].append(i)
    return g


def _region_infos(planner, g: TaskGraph) -> None:
    """Each region's buffers and valid pieces, into the graph (for finish())."""
    for name, rp in planner.planners.items():
        info = planner._region_info.get(name) if name not in planner._dirty else None
        if info is None:
            if rp is None:              # (a one-shot planner makes a region's planner lazily)
                rp = planner._planner(name)
            info = planner._region_info[name] = (
                list(rp.instance_rects.items()), list(rp.partial_rects.items()),
                list(rp.initial), rp.final_valid(), rp.final_pending())
        instance, partial, initial, final_valid, pend = info
        for dev, rect in instance:
            g.instance_rects[name, dev] = rect
        for dev, rect in partial:
            g.partial_rects[name, dev] = rect
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


def _release(planner) -> None:
    """Drop what only planning more or re-planning needs (finish(release=True)): the
    region planners, logs, read node lists, per-launch preds and targets, and the node
    groups (the graph's nodes are the groups' nodes). The planner is unusable after."""
    planner.planners, planner.region_nodes, planner.log = {}, {}, defaultdict(list)
    planner._groups, planner._read_groups, planner._tasks, planner._task_memo = {}, {}, {}, {}
    planner._region_info = {}
    for lp in planner.plans:
        lp.task_preds = lp.task_targets = lp.points = lp.refs = None
