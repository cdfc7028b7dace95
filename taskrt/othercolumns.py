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
read chunk by chunk (`_columns`); tests/strategy/test_other_columns.py and
test_sim_classes.py compare both passes with those definitions asked node by node.
"""
from __future__ import annotations

from functools import partial
from itertools import chain
from operator import attrgetter

import numpy as np

from .region import _ITEMSIZE
from .taskclasses import KIND_CODE, kind_codes
from .taskgraph import ALLREDUCE, COPY, REDUCE

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
        or per node of `nodes` its kind_codes (TaskClasses.kinds)."""
        out = cls()
        i8 = np.int64
        others = list(map(nodes.__getitem__, ids.tolist()))
        out.ids, out.nodes = ids, others
        kinds = kind_codes(others) if kinds is None else kinds[ids]
        at = {kind: np.flatnonzero(kinds == KIND_CODE[kind])
              for kind in (COPY, REDUCE, ALLREDUCE)}
        out.copy_at, out.reduce_at, out.allreduce_at = at[COPY], at[REDUCE], at[ALLREDUCE]
        index = {name: i for i, name in enumerate(regions)}

        def input_count(chunk):
            return map(len, map(_INPUTS, chunk))
        copies = list(map(others.__getitem__, out.copy_at.tolist()))
        (out.copy_src, out.copy_dst, region_ids, volume, out.copy_reduction,
         out.copy_from_partial) = _columns(
            copies, [(_SRC, i8), (_DST, i8), (_region_ids, i8), (_VOLUME, i8),
                     (_REDUCTION, bool), (_FROM_PARTIAL, bool)])
        out.copy_region, size = _by_region(copies, region_ids, index)
        out.copy_bytes = volume * size
        reduces = list(map(others.__getitem__, out.reduce_at.tolist()))
        out.reduce_device, region_ids, volume, counts = _columns(
            reduces, [(_DEVICE, i8), (_region_ids, i8), (_VOLUME, i8), (input_count, i8)])
        out.reduce_region, size = _by_region(reduces, region_ids, index)
        out.reduce_bytes = volume * size
        out.input_ptr = np.zeros(len(reduces) + 1, dtype=i8)
        np.cumsum(counts, out=out.input_ptr[1:])
        inputs = list(chain.from_iterable(map(_INPUTS, reduces)))

        def source(chunk):
            return map(_SOURCE_CODE.__getitem__, map(_SOURCE, chunk))
        out.input_source, volume, out.input_copy = _columns(
            inputs, [(source, i8), (_VOLUME, i8), (_COPY_ID, i8)])
        # An input's bytes are its reduce's region's: region.nbytes(input.rect).
        out.input_bytes = volume * np.repeat(size, counts)
        return out

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


def _region_ids(chunk):
    """Per node its region object's id (node by node; _by_region reads each region once)."""
    return map(id, map(_REGION, chunk))


def _by_region(items: list, region_ids: np.ndarray, index: dict) -> tuple:
    """(per item its region's index in `index` (name -> index; -1 if not there), per item
    its region's item size), `region_ids` their regions' ids (_region_ids): one region per
    run of equal ids read (a group's nodes are one region's: 264 runs of GPT-3 2.7B's 1.53M
    copies at 1,024 GPUs), not a name and a dtype per item. (Every region is alive while
    its nodes are: equal ids, one region.)"""
    n, i8 = len(region_ids), np.int64
    heads = np.flatnonzero(region_ids[1:] != region_ids[:-1]) + 1
    heads = np.concatenate([np.zeros(min(n, 1), dtype=i8), heads])
    firsts = [items[h].region for h in heads.tolist()]
    lengths = np.diff(np.append(heads, n))
    return (np.repeat(np.fromiter((index.get(r.name, -1) for r in firsts), dtype=i8,
                                  count=len(firsts)), lengths),
            np.repeat(np.fromiter((_ITEMSIZE[r.dtype] for r in firsts), dtype=i8,
                                  count=len(firsts)), lengths))


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
