"""Small helpers shared by the taskrt tests: launches from explicit tables, graph queries."""
from __future__ import annotations

from itertools import product
from typing import Callable, Sequence

from taskrt import IndexLaunch, RegionRequirement, block_rect


def noop(ctx, *tensors):
    return None


def launch(name: str, points: Sequence[Sequence[tuple]], devices: Sequence[int],
           task: Callable = noop, **kw) -> IndexLaunch:
    """A 1-d launch whose point i has requirements points[i] = [(region, rect, privilege)...]."""
    table = [tuple(RegionRequirement(*r) for r in reqs) for reqs in points]
    return IndexLaunch(name, task, (len(table),), lambda c: table[c[0]], devices=devices, **kw)


def launches_of(program, tag: str = "") -> list[IndexLaunch]:
    """Launches from a random program's tables: program[li] = (points, replicas), points[i] =
    (device, [(region, rect, privilege)...]); launch li is named f"l{li}{tag}"."""
    launches = []
    for li, (points, replicas) in enumerate(program):
        table = [tuple(RegionRequirement(g, r, p) for g, r, p in reqs) for _, reqs in points]
        launches.append(IndexLaunch(f"l{li}{tag}", noop, (len(table),),
                                    lambda c, table=table: table[c[0]],
                                    devices=[d for d, _ in points], replicas=replicas))
    return launches


def one(name, region, rect, privilege, device, task=noop, **kw) -> IndexLaunch:
    """A launch of a single point task with a single requirement."""
    return launch(name, [[(region, rect, privilege)]], [device], task, **kw)


def block_parts(region, degrees) -> list[tuple]:
    """(color, rect) of each block part of `region`, colors row-major."""
    return [(c, block_rect(region.shape, degrees, c))
            for c in product(*(range(d) for d in degrees))]


def ancestors(graph, node_id: int) -> set[int]:
    seen, stack = set(), list(graph.preds[node_id])
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(graph.preds[n])
    return seen


def descendants(graph, node_id: int) -> set[int]:
    seen, stack = set(), list(graph.succs[node_id])
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(graph.succs[n])
    return seen


def task_of(graph, launch_name: str, color=(0,)):
    for nid in graph.launch_nodes[launch_name]:
        n = graph.nodes[nid]
        if n.kind == "task" and n.color == tuple(color):
            return n
    raise KeyError((launch_name, color))


def nodes_of(graph, launch_name: str, kind: str) -> list:
    return [graph.nodes[i] for i in graph.launch_nodes.get(launch_name, [])
            if graph.nodes[i].kind == kind]


def copies(graph, launch_name: str | None = None, reduction: bool | None = None) -> list:
    return [n for n in graph.nodes if n.kind == "copy"
            and (launch_name is None or n.owner == launch_name)
            and (reduction is None or n.reduction == reduction)]
