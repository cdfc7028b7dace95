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
from itertools import chain, compress, repeat
from operator import attrgetter, is_

import numpy as np

from .region import _ITEMSIZE
from .taskgraph import ALLREDUCE, COPY, REDUCE

_KIND, _SRC, _DST, _DEVICE = (attrgetter("kind"), attrgetter("src"), attrgetter("dst"),
                              attrgetter("device"))
_REDUCTION, _FROM_PARTIAL = attrgetter("reduction"), attrgetter("from_partial")
_REGION_NAME, _DTYPE, _VOLUME = (attrgetter("region.name"), attrgetter("region.dtype"),
                                 attrgetter("rect.volume"))
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
    def of(cls, nodes: list, ids: np.ndarray, regions) -> "OtherColumns":
        """`nodes`: a graph's nodes (node i at index i); `ids`: those that are no tasks
        (TaskClasses.others); `regions`: the graph's regions, names in order."""
        out = cls()
        i8 = np.int64
        others = list(map(nodes.__getitem__, ids.tolist()))
        out.ids, out.nodes = ids, others
        kinds = list(map(_KIND, others))
        at, of_kind = {}, {}
        for kind in (COPY, REDUCE, ALLREDUCE):
            flags = list(map(is_, kinds, repeat(kind)))
            at[kind] = np.flatnonzero(np.fromiter(flags, dtype=bool, count=len(flags)))
            of_kind[kind] = flags
        out.copy_at, out.reduce_at, out.allreduce_at = at[COPY], at[REDUCE], at[ALLREDUCE]
        index = {name: i for i, name in enumerate(regions)}
        region_of = partial(map, index.get)    # (names, defaults -1) -> indices

        def region_index(chunk):
            return region_of(map(_REGION_NAME, chunk), repeat(-1))

        def itemsize(chunk):
            return map(_ITEMSIZE.__getitem__, map(_DTYPE, chunk))

        def input_count(chunk):
            return map(len, map(_INPUTS, chunk))
        copies = list(compress(others, of_kind[COPY]))
        (out.copy_src, out.copy_dst, out.copy_region, volume, size, out.copy_reduction,
         out.copy_from_partial) = _columns(
            copies, [(_SRC, i8), (_DST, i8), (region_index, i8), (_VOLUME, i8),
                     (itemsize, i8), (_REDUCTION, bool), (_FROM_PARTIAL, bool)])
        out.copy_bytes = volume * size
        reduces = list(compress(others, of_kind[REDUCE]))
        out.reduce_device, out.reduce_region, volume, size, counts = _columns(
            reduces, [(_DEVICE, i8), (region_index, i8), (_VOLUME, i8), (itemsize, i8),
                      (input_count, i8)])
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
    kept in classes.other_columns: the timing and the memory model share them)."""
    if classes.other_columns is None:
        classes.other_columns = OtherColumns.of(graph.nodes, classes.others, graph.regions)
    return classes.other_columns


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
