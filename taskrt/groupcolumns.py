"""A one-shot graph's nodes that are not point tasks, as columns made per node group by the
planner (graphview.graph_of), not read back from the node objects by the simulator.

The simulator's timing and memory model take copies, reduces and all-reduces as columns
(othercolumns.OtherColumns: per copy src, dst, region, bytes, flags; per reduce device,
region, bytes and inputs). Read from the objects that is ~0.9 s of GPT-3 2.7B at 1,024
GPUs under Megatron t=8 (1.53M copies, 1.1M reduce inputs), and most of those nodes are
class members' read nodes stamped from a template (stampedreads.py): the template entry's
nodes with another region and owner. So a template entry's columns are read once
(`EntryColumns`, kept on its EntryRefs) and every member's group takes them with its own
region (one per group: a group is one launch's reads of one region) and its first node
id (a reduce's staged copies are made with it, in its group: their ids are the group's
first id plus their index). Other groups (templates, regions planned alone) are read
from their nodes, their inputs' copy ids already set. `planned_columns` joins them in
node order into the OtherColumns that OtherColumns.of would read from the graph's nodes
(tests/taskrt/test_group_columns.py compares the two, array by array).
"""
from __future__ import annotations

from itertools import islice
from operator import attrgetter

import numpy as np

from .othercolumns import _SOURCE_CODE, OtherColumns
from .region import _ITEMSIZE
from .taskclasses import KIND_CODE, kind_codes
from .taskgraph import NodeKind, ReduceInput

_I8, _B = np.int64, np.bool_
_TASK_CODE, _COPY_CODE, _REDUCE_CODE, _ALLREDUCE_CODE = map(KIND_CODE.__getitem__, NodeKind)
_SRC, _DST, _DEVICE = attrgetter("src"), attrgetter("dst"), attrgetter("device")
_REDUCTION, _FROM_PARTIAL = attrgetter("reduction"), attrgetter("from_partial")
_VOLUME, _INPUTS = attrgetter("rect.volume"), attrgetter("inputs")
_SOURCE, _COPY_ID = attrgetter("source"), attrgetter("copy_id")


class EntryColumns:
    """One read group's nodes as columns, but for their region and ids: per node its kind
    code; per copy (in order) src, dst, volume, reduction, from_partial; per reduce device,
    volume and number of inputs; per input its source code, volume and copy: the index of
    its staged copy in the group (`relative`) or the copy's id, -1 for none."""
    __slots__ = ("kinds", "copy_src", "copy_dst", "copy_volume", "copy_reduction",
                 "copy_from_partial", "reduce_device", "reduce_volume", "input_count",
                 "input_source", "input_volume", "input_copy", "relative", "restage")

    def __init__(self, nodes: list, staged_at=None):
        """`nodes`: a group's (or template entry's) nodes; `staged_at`: None (the inputs'
        copy ids are read), or per node None / per input the index of its staged copy among
        `nodes` or -1 (a template entry's)."""
        self.kinds = kind_codes(nodes)
        codes = self.kinds.tolist()
        copies = [n for n, c in zip(nodes, codes) if c == _COPY_CODE]
        reduces = [n for n, c in zip(nodes, codes) if c == _REDUCE_CODE]
        self.copy_src = _column(copies, _SRC, _I8)
        self.copy_dst = _column(copies, _DST, _I8)
        self.copy_volume = _column(copies, _VOLUME, _I8)
        self.copy_reduction = _column(copies, _REDUCTION, _B)
        self.copy_from_partial = _column(copies, _FROM_PARTIAL, _B)
        self.reduce_device = _column(reduces, _DEVICE, _I8)
        self.reduce_volume = _column(reduces, _VOLUME, _I8)
        inputs = [i for n in reduces for i in n.inputs]
        self.input_count = np.fromiter(map(len, map(_INPUTS, reduces)), dtype=_I8,
                                       count=len(reduces))
        self.input_source = np.fromiter(map(_SOURCE_CODE.__getitem__, map(_SOURCE, inputs)),
                                        dtype=_I8, count=len(inputs))
        self.input_volume = _column(inputs, _VOLUME, _I8)
        self.relative = staged_at is not None
        if staged_at is None:
            self.input_copy = _column(inputs, _COPY_ID, _I8)
        else:
            at = []
            for node, c, s in zip(nodes, codes, staged_at):
                if c == _REDUCE_CODE:
                    at += [-1] * len(node.inputs) if s is None else s
            self.input_copy = np.array(at, dtype=_I8)
        # (relative: what staged_inputs remakes a member's reduces' inputs from)
        self.restage = (np.flatnonzero(self.kinds == _REDUCE_CODE).tolist(),
                        list(map(_SOURCE, inputs)), [i.rect for i in inputs],
                        self.input_count.tolist()) if self.relative else None


def _column(items: list, get, dtype) -> np.ndarray:
    return np.fromiter(map(get, items), dtype=dtype, count=len(items))


def planned_columns(groups: list, starts: list, nodes: list, regions: dict) -> OtherColumns:
    """The OtherColumns of a graph's nodes `nodes` (node i at index i), made from its node
    groups `groups` in node order (`starts`: each one's first node id): a task group's
    nodes are all tasks, a read group's are of its key's region (`regions`: the graph's,
    by name, in order) with its EntryColumns (`group.columns`) or read from its nodes."""
    index = {name: i for i, name in enumerate(regions)}
    kinds, read, inputs_of = [], [], []
    regs, sizes, copies, reduces = [], [], [], []
    for group, start in zip(groups, starts):
        name = group.key[1]
        if name is None:                        # (a task group: tasks only)
            kinds.append(np.zeros(len(group.nodes), dtype=np.int8))
            continue
        cols = group.columns
        if cols is None:
            cols = EntryColumns(group.nodes)
        kinds.append(cols.kinds)
        read.append(cols)
        regs.append(index.get(name, -1))
        sizes.append(_ITEMSIZE[regions[name].dtype])
        copies.append(len(cols.copy_src))
        reduces.append(len(cols.reduce_device))
        at = cols.input_copy
        inputs_of.append(np.where(at >= 0, at + start, -1) if cols.relative else at)
    kinds = np.concatenate(kinds) if kinds else np.zeros(0, dtype=np.int8)
    out = OtherColumns()
    out.ids = np.flatnonzero(kinds != _TASK_CODE)
    out.nodes = list(map(nodes.__getitem__, out.ids.tolist()))
    mine = kinds[out.ids]
    out.copy_at = np.flatnonzero(mine == _COPY_CODE)
    out.reduce_at = np.flatnonzero(mine == _REDUCE_CODE)
    out.allreduce_at = np.flatnonzero(mine == _ALLREDUCE_CODE)

    def joined(attr: str, dtype) -> np.ndarray:
        parts = [getattr(c, attr) for c in read]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
    copies, reduces = np.array(copies, dtype=_I8), np.array(reduces, dtype=_I8)
    regs, sizes = np.array(regs, dtype=_I8), np.array(sizes, dtype=_I8)
    out.copy_src, out.copy_dst = joined("copy_src", _I8), joined("copy_dst", _I8)
    out.copy_reduction = joined("copy_reduction", _B)
    out.copy_from_partial = joined("copy_from_partial", _B)
    out.copy_region = np.repeat(regs, copies)
    out.copy_bytes = joined("copy_volume", _I8) * np.repeat(sizes, copies)
    out.reduce_device = joined("reduce_device", _I8)
    out.reduce_region = np.repeat(regs, reduces)
    size = np.repeat(sizes, reduces)
    out.reduce_bytes = joined("reduce_volume", _I8) * size
    counts = joined("input_count", _I8)
    out.input_ptr = np.zeros(len(counts) + 1, dtype=_I8)
    np.cumsum(counts, out=out.input_ptr[1:])
    out.input_source = joined("input_source", _I8)
    out.input_bytes = joined("input_volume", _I8) * np.repeat(size, counts)
    out.input_copy = np.concatenate(inputs_of) if inputs_of else np.zeros(0, dtype=_I8)
    return out


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
