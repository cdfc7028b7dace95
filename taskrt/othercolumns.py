"""OtherColumns: a graph's nodes that are not point tasks (copies, reduces, all-reduces) as
columns, read from the node objects by C-level maps (attrgetter), for the whole-graph passes
that take tasks per class (taskrt/taskclasses.py): the simulator's timing
(strategy/timearrays.py) and the memory model's buffers (taskrt/bufferuses.py).

Under Megatron's tensor parallelism these are most of a graph (GPT-3 2.7B at 1,024 GPUs,
t=8: 1.53M copies, 143k reduces and 1,890 all-reduces of 2.62M nodes; its all-reduces
inside the blocks are reduction copies and reduces): asked node by node they were most of
the simulation (node arrays 3.7-4.0 s, memory model 4.4-4.5 s; now 2.2-2.3 and 1.7-1.9:
docs/design.md "Simulator speed"). The columns' values are the node attributes the per-node definitions
read (CopyNode.nbytes is region.nbytes(rect), i.e. rect.volume times the dtype's size),
read by one reader, EntryColumns (some nodes of one region, chunk by chunk: `_columns`),
and joined by `joined`: OtherColumns.of reads a graph per run of one region, the planner
per node group (taskrt/groupcolumns.py); tests/strategy/test_other_columns.py and
test_sim_classes.py compare both passes with those definitions asked node by node.
"""
from __future__ import annotations

from functools import partial
from itertools import chain
from operator import attrgetter

import numpy as np

from .region import _ITEMSIZE
from .taskclasses import KIND_CODE, kind_codes
from .taskgraph import NodeKind

_I8, _B = np.int64, np.bool_
_TASK_CODE, _COPY_CODE, _REDUCE_CODE, _ALLREDUCE_CODE = map(KIND_CODE.__getitem__, NodeKind)
_SRC, _DST, _DEVICE = attrgetter("src"), attrgetter("dst"), attrgetter("device")
_REDUCTION, _FROM_PARTIAL = attrgetter("reduction"), attrgetter("from_partial")
_REGION, _VOLUME = attrgetter("region"), attrgetter("rect.volume")
_INPUTS, _SOURCE, _COPY_ID = attrgetter("inputs"), attrgetter("source"), attrgetter("copy_id")

# ReduceInput.source as a code.
PARTIAL_INPUT, STAGED_INPUT, INSTANCE_INPUT = 0, 1, 2
_SOURCE_CODE = {"partial": PARTIAL_INPUT, "staged": STAGED_INPUT, "instance": INSTANCE_INPUT}


class OtherColumns:
    """The non-task nodes `nodes` (ids `ids`, ascending), by kind: `copy_at`, `reduce_at`,
    `allreduce_at` their positions in `nodes`, and per copy its src, dst, region (index into
    the graph's regions, -1 if it lists none of that name), bytes, reduction and from_partial
    flags; per reduce its device, region, bytes and inputs (CSR: `input_ptr`; per input its
    source code, bytes and copy_id)."""
    __slots__ = ("ids", "nodes", "copy_at", "copy_src", "copy_dst", "copy_region",
                 "copy_bytes", "copy_reduction", "copy_from_partial", "reduce_at",
                 "reduce_device", "reduce_region", "reduce_bytes", "input_ptr",
                 "input_source", "input_bytes", "input_copy", "allreduce_at")

    @classmethod
    def of(cls, nodes: list, ids: np.ndarray, regions, kinds: np.ndarray | None = None
           ) -> "OtherColumns":
        """`nodes`: a graph's nodes (node i at index i); `ids`: those that are no tasks
        (TaskClasses.others); `regions`: the graph's regions, names in order; `kinds`: None,
        or per node of `nodes` its kind_codes (TaskClasses.kinds). Read per run of nodes of
        one region object (a group's nodes are one region's: 264 runs of GPT-3 2.7B's 1.53M
        copies at 1,024 GPUs), as EntryColumns reads a node group's."""
        others = list(map(nodes.__getitem__, ids.tolist()))
        mine = kind_codes(others) if kinds is None else kinds[ids]
        index = {name: i for i, name in enumerate(regions)}
        region_ids = np.fromiter(map(id, map(_REGION, others)), dtype=np.int64,
                                 count=len(others))
        heads = np.flatnonzero(region_ids[1:] != region_ids[:-1]) + 1
        bounds = [0, *heads.tolist(), len(others)] if others else [0]
        parts = []
        for lo, hi in zip(bounds, bounds[1:]):
            region = others[lo].region
            parts.append((EntryColumns(others[lo:hi], kinds=mine[lo:hi]),
                          index.get(region.name, -1), _ITEMSIZE[region.dtype], None))
        return joined(ids, others, mine, parts)

    def __len__(self) -> int:
        return len(self.nodes)

    def allreduces(self) -> list:
        return [self.nodes[k] for k in self.allreduce_at.tolist()]

    def max_device(self) -> int:
        """The largest device any of the nodes runs on (-1 without nodes)."""
        top = max((int(a.max()) for a in (self.copy_src, self.copy_dst, self.reduce_device)
                   if len(a)), default=-1)
        for node in self.allreduces():
            top = max(top, max(node.devices, default=-1))
        return top


class EntryColumns:
    """Some non-task nodes of one region (a node group's, a template entry's, a run of a
    graph's) as columns, but for their region and ids: per node its kind code; per copy (in
    order) src, dst, volume, reduction, from_partial; per reduce device, volume and number
    of inputs; per input its source code, volume and copy: the index of its staged copy
    among the nodes (`relative`) or the copy's id, -1 for none. The one reader of those
    node attributes: OtherColumns.of reads a graph with it, the planner its node groups
    (taskrt/groupcolumns.py)."""
    __slots__ = ("kinds", "copy_src", "copy_dst", "copy_volume", "copy_reduction",
                 "copy_from_partial", "reduce_device", "reduce_volume", "input_count",
                 "input_source", "input_volume", "input_copy", "relative", "restage")

    def __init__(self, nodes: list, staged_at=None, kinds: np.ndarray | None = None):
        """`nodes`: the nodes (none a task); `staged_at`: None (the inputs' copy ids are
        read), or per node None / per input the index of its staged copy among `nodes` or
        -1 (a template entry's); `kinds`: their kind codes, or None to read them."""
        self.kinds = kinds = kind_codes(nodes) if kinds is None else kinds
        copies = list(map(nodes.__getitem__, np.flatnonzero(kinds == _COPY_CODE).tolist()))
        reduce_at = np.flatnonzero(kinds == _REDUCE_CODE).tolist()
        reduces = list(map(nodes.__getitem__, reduce_at))
        (self.copy_src, self.copy_dst, self.copy_volume, self.copy_reduction,
         self.copy_from_partial) = _columns(
            copies, [(_SRC, _I8), (_DST, _I8), (_VOLUME, _I8), (_REDUCTION, _B),
                     (_FROM_PARTIAL, _B)])
        self.reduce_device, self.reduce_volume, self.input_count = _columns(
            reduces, [(_DEVICE, _I8), (_VOLUME, _I8), (_input_count, _I8)])
        inputs = list(chain.from_iterable(map(_INPUTS, reduces)))
        self.relative = staged_at is not None
        if staged_at is None:
            self.input_source, self.input_volume, self.input_copy = _columns(
                inputs, [(_source_codes, _I8), (_VOLUME, _I8), (_COPY_ID, _I8)])
            self.restage = None
            return
        self.input_source, self.input_volume = _columns(
            inputs, [(_source_codes, _I8), (_VOLUME, _I8)])
        at = []
        for k in reduce_at:
            s = staged_at[k]
            at += [-1] * len(nodes[k].inputs) if s is None else s
        self.input_copy = np.array(at, dtype=_I8)
        # (what groupcolumns.staged_inputs remakes a member's reduces' inputs from)
        self.restage = (reduce_at, list(map(_SOURCE, inputs)), [i.rect for i in inputs],
                        self.input_count.tolist())


def joined(ids: np.ndarray, nodes: list, kinds: np.ndarray, parts: list) -> OtherColumns:
    """The OtherColumns of non-task nodes `nodes` (ids `ids`, kind codes `kinds`) from the
    EntryColumns of their runs in order, `parts`: per run (its columns, its region's index
    in the graph's regions or -1, the region's item size, its first node id where its
    columns are relative, else None)."""
    out = OtherColumns()
    out.ids, out.nodes = ids, nodes
    out.copy_at = np.flatnonzero(kinds == _COPY_CODE)
    out.reduce_at = np.flatnonzero(kinds == _REDUCE_CODE)
    out.allreduce_at = np.flatnonzero(kinds == _ALLREDUCE_CODE)
    read = [p[0] for p in parts]

    def join(attr: str, dtype) -> np.ndarray:
        arrays = [getattr(c, attr) for c in read]
        return np.concatenate(arrays) if arrays else np.zeros(0, dtype=dtype)

    def per_run(values, attr: str) -> np.ndarray:
        return np.repeat(np.array(values, dtype=_I8),
                         np.fromiter((len(getattr(c, attr)) for c in read), dtype=_I8,
                                     count=len(read)))
    regs, sizes = [p[1] for p in parts], [p[2] for p in parts]
    out.copy_src, out.copy_dst = join("copy_src", _I8), join("copy_dst", _I8)
    out.copy_reduction = join("copy_reduction", _B)
    out.copy_from_partial = join("copy_from_partial", _B)
    out.copy_region = per_run(regs, "copy_src")
    out.copy_bytes = join("copy_volume", _I8) * per_run(sizes, "copy_src")
    out.reduce_device = join("reduce_device", _I8)
    out.reduce_region = per_run(regs, "reduce_device")
    size = per_run(sizes, "reduce_device")
    out.reduce_bytes = join("reduce_volume", _I8) * size
    counts = join("input_count", _I8)
    out.input_ptr = np.zeros(len(counts) + 1, dtype=_I8)
    np.cumsum(counts, out=out.input_ptr[1:])
    out.input_source = join("input_source", _I8)
    # An input's bytes are its reduce's region's: region.nbytes(input.rect).
    out.input_bytes = join("input_volume", _I8) * np.repeat(size, counts)
    copies = [c.input_copy if start is None else
              np.where(c.input_copy >= 0, c.input_copy + start, -1)
              for c, (_, _, _, start) in zip(read, parts)]
    out.input_copy = np.concatenate(copies) if copies else np.zeros(0, dtype=_I8)
    return out


def other_columns(graph, classes) -> OtherColumns:
    """The OtherColumns of `graph`'s non-task nodes, `classes` its TaskClasses (made once,
    kept in classes.other_columns: the timing and the memory model share them): those the
    planner made with a one-shot graph (graph.other_columns, taskrt/groupcolumns.py) where
    it has them for these nodes, else read from the nodes."""
    if classes.other_columns is None:
        planned = getattr(graph, "other_columns", None)     # (groupcolumns.py: a plan's)
        if planned is not None and np.array_equal(planned.ids, classes.others):
            classes.other_columns = planned
        else:
            classes.other_columns = OtherColumns.of(graph.nodes, classes.others,
                                                    graph.regions, classes.kinds)
    return classes.other_columns


def _input_count(chunk):
    return map(len, map(_INPUTS, chunk))


def _source_codes(chunk):
    return map(_SOURCE_CODE.__getitem__, map(_SOURCE, chunk))


def _columns(items: list, columns: list) -> list[np.ndarray]:
    """Per (getter, dtype) of `columns`, the array of getter's values of `items`: a getter
    an attrgetter (a value per item) or a function of a list of items (an iterator over their
    values). Made chunk by chunk, every column of a chunk in turn, while its objects are in
    the CPU's caches (column by column over the whole list, each pass fetched every object
    from memory again: 2.5x the time of a reduce's inputs)."""
    n = len(items)
    outs = [np.empty(n, dtype=dtype) for _, dtype in columns]
    makers = [partial(map, get) if isinstance(get, attrgetter) else get for get, _ in columns]
    for lo in range(0, n, _CHUNK):
        chunk = items[lo:lo + _CHUNK]
        k = len(chunk)
        for out, make in zip(outs, makers):
            out[lo:lo + k] = np.fromiter(make(chunk), dtype=out.dtype, count=k)
    return outs


_CHUNK = 4096
