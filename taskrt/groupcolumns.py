"""A one-shot graph's nodes that are not point tasks, as columns made per node group by the
planner (graphview.graph_of), not read back from the node objects by the simulator.

The simulator's timing and memory model take copies, reduces and all-reduces as columns
(othercolumns.OtherColumns: per copy src, dst, region, bytes, flags; per reduce device,
region, bytes and inputs). Read from the objects that is ~0.9 s of GPT-3 2.7B at 1,024
GPUs under Megatron t=8 (1.53M copies, 1.1M reduce inputs), and most of those nodes are
class members' read nodes stamped from a template (stampedreads.py): the template entry's
nodes with another region and owner. So a template entry's columns are read once
(othercolumns.EntryColumns, kept on its EntryRefs) and every member's group takes them with its own
region (one per group: a group is one launch's reads of one region) and its first node
id (a reduce's staged copies are made with it, in its group: their ids are the group's
first id plus their index). Other groups (templates, regions planned alone) are read
from their nodes, their inputs' copy ids already set. `planned_columns` joins them in
node order (othercolumns.joined, as OtherColumns.of joins a graph's runs of one region) into
the OtherColumns that OtherColumns.of would read from the graph's nodes
(tests/taskrt/test_group_columns.py compares the two, array by array).
"""
from __future__ import annotations

from itertools import islice

import numpy as np

from .othercolumns import EntryColumns, OtherColumns, joined
from .region import _ITEMSIZE
from .taskclasses import KIND_CODE
from .taskgraph import NodeKind, ReduceInput

_TASK_CODE = KIND_CODE[NodeKind.TASK]


def planned_columns(groups: list, starts: list, nodes: list, regions: dict
                    ) -> tuple[OtherColumns, np.ndarray]:
    """(The OtherColumns of a graph's nodes `nodes` (node i at index i), every node's kind
    code (TaskGraph.node_kinds)), made from its node
    groups `groups` in node order (`starts`: each one's first node id): a task group's
    nodes are all tasks, a read group's are of its key's region (`regions`: the graph's,
    by name, in order) with its EntryColumns (`group.columns`) or read from its nodes."""
    index = {name: i for i, name in enumerate(regions)}
    kinds, parts = [], []
    for group, start in zip(groups, starts):
        name = group.key[1]
        if name is None:                        # (a task group: tasks only)
            kinds.append(np.full(len(group.nodes), _TASK_CODE, dtype=np.int8))
            continue
        cols = group.columns
        if cols is None:
            cols = EntryColumns(group.nodes)
        kinds.append(cols.kinds)
        parts.append((cols, index.get(name, -1), _ITEMSIZE[regions[name].dtype],
                      start if cols.relative else None))
    kinds = np.concatenate(kinds) if kinds else np.zeros(0, dtype=np.int8)
    ids = np.flatnonzero(kinds != _TASK_CODE)
    return joined(ids, list(map(nodes.__getitem__, ids.tolist())), kinds[ids], parts), kinds


def staged_inputs(group, start: int) -> None:
    """Give the reduces of a class member's read group (its columns relative, `start` its
    first node id) their inputs with their staged copies' ids, as graph_of gives every
    reduce (ReduceInput(source, rect, the copy's id) where a copy stages it; the others
    equal to the template's, copy_id -1): by C maps over the entry's inputs, not a Python
    step per input."""
    at, sources, rects, counts = group.columns.restage
    if not at:
        return
    copy = group.columns.input_copy
    ids = np.where(copy >= 0, copy + start, -1).tolist()
    made = iter(list(map(ReduceInput, sources, rects, ids)))
    nodes = group.nodes
    for k, n in zip(at, counts):
        nodes[k].inputs = tuple(islice(made, n))
