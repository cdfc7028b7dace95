"""BufferUses: every buffer of a TaskGraph and its nodes' uses of them, as arrays (the
memory model's input: taskrt/liveness.py picks the temporaries and computes the peak).

Buffer keys as taskrt/bufferkeys.py defines them; tasks are taken per class
(taskrt/taskclasses.py), the regions' buffers per shared list of rects
(taskrt/bufferrects.py) and copies and reduces by columns (taskrt/otheruses.py), so a graph
of a million nodes is a few thousand steps of Python and numpy over its uses.
"""
from __future__ import annotations

from itertools import chain, compress, count, repeat
from operator import attrgetter, call, itemgetter

import numpy as np

from .bufferkeys import INSTANCE, PARTIAL, STATE, buffers_of, own_bytes, task_reads_writes
from .bufferrects import BufferRects
from .othercolumns import other_columns
from .otheruses import StagingKeys, column_uses
from .taskclasses import TaskClasses
from .taskgraph import ALLREDUCE

_FIRST, _SECOND, _VOLUME = itemgetter(0), itemgetter(1), attrgetter("volume")
_COLOR = attrgetter("color")


class BufferUses:
    """Every buffer of a graph and its nodes' uses of them, as arrays.

    Buffers: the regions' instance and partial-sum buffers (graph.instance_rects,
    partial_rects, in that order), then the staging buffers and saved states in the order
    of their first use (`extras`, an Extras: keys as buffers_of gives them, those of the
    copies taken by columns made when asked); per buffer its region
    index (`region`, -1 for an extra; into graph.regions), device and bytes. Uses: uses()
    hands them out as arrays piece by piece, in no particular order, a node's use of a
    buffer possibly repeated. And what results_of
    needs: the regions read (R, RW) by tasks that write something, and per region
    written the tuples of regions its writers read.

    Tasks are taken per class (taskrt/taskclasses.py): buffers_of and task_reads_writes of
    a class's first task give every task of the class its buffers, on its own device,
    with numpy; saved state per task of a launch that has some, by C maps over those
    tasks (`_state_uses`). Copies and
    reduces are taken by columns (taskrt/otheruses.py: most of a tensor-parallel graph), or
    where a reduce's staged input is not its copy's staging buffer one by one (buffers_of);
    all-reduces (few) one by one, each with numpy."""
    __slots__ = ("region", "device", "nbytes", "extras", "read_by_writer", "reads_of_writers",
                 "key_table", "_to_buffers", "_before", "_tasks", "_after")

    @classmethod
    def of(cls, graph, classes: TaskClasses | None = None) -> "BufferUses":
        nodes, i8 = graph.nodes, np.int64
        classes = classes if classes is not None else TaskClasses.of(nodes)
        out = cls()
        regions = {name: i for i, name in enumerate(graph.regions)}
        n_regions = len(regions)
        # The regions' buffers: per distinct list of (device, rect) pairs (regions planned
        # alike share one: bufferrects.py) its devices and volumes, once.
        itemsize = np.fromiter((r.itemsize for r in graph.regions.values()), dtype=i8,
                               count=n_regions)
        rect_keys, r_region, r_dev, r_bytes = [], [], [], []
        per_list: dict = {}     # id(pairs) -> (pairs, devices, volumes)
        for kind, rects in ((INSTANCE, graph.instance_rects), (PARTIAL, graph.partial_rects)):
            names, lists, at, dev, vol = [], [], [], [], []
            for name, pairs in as_buffer_rects(rects).per_region():
                known = per_list.get(id(pairs))
                if known is None or known[0] is not pairs:
                    devs = np.fromiter(map(_FIRST, pairs), dtype=i8, count=len(pairs))
                    known = per_list[id(pairs)] = (
                        pairs, devs, np.fromiter(map(_VOLUME, map(_SECOND, pairs)), dtype=i8,
                                                 count=len(pairs)))
                names.append(name)
                lists.append(pairs)
                at.append(regions[name])
                dev.append(known[1])
                vol.append(known[2])
            counts = np.fromiter(map(len, lists), dtype=i8, count=len(lists))
            rect_keys.append((kind, names, lists, np.cumsum(counts)))
            at = np.repeat(np.array(at, dtype=i8), counts)
            r_region.append(at + kind * n_regions)
            r_dev.append(np.concatenate(dev) if dev else np.zeros(0, dtype=i8))
            r_bytes.append(itemsize[at] * (np.concatenate(vol) if vol else
                                           np.zeros(0, dtype=i8)))
        r_region, r_dev, r_bytes = (np.concatenate(x) for x in (r_region, r_dev, r_bytes))
        cols = other_columns(graph, classes)
        top = max(int(r_dev.max()) if len(r_dev) else -1, cols.max_device())
        if len(classes.device):
            top = max(top, int(classes.device.max()))
        n_dev = top + 1
        staged = StagingKeys([], np.zeros(0, dtype=i8), np.zeros(0, dtype=i8),
                             np.zeros(0, dtype=i8))   # the extras by columns, first
        extras: list = []                         # the other extras, numbered after them
        extra_ids: dict = {}
        base = 2 * n_regions * n_dev              # extras are numbered base + their index

        def number(key) -> int:
            kind = key[0]
            if kind == INSTANCE or kind == PARTIAL:
                r = regions.get(key[1])
                return -1 if r is None else (kind * n_regions + r) * n_dev + key[2]
            e = extra_ids.get(key)
            if e is None:
                e = extra_ids[key] = len(staged) + len(extras)
                extras.append(key)
            return base + e
        ub: list[int] = []
        un: list[int] = []
        # Copies and reduces by columns (their staging buffers the first extras), else
        # one by one.
        by_columns = column_uses(cols, n_regions, n_dev, base)
        column_pairs, extra_dev, extra_bytes, others = [], [], [], cols.nodes
        if by_columns is not None:
            # (Not in extra_ids: no key asked of number() below is a staging buffer.)
            column_pairs, staged, dev, size = by_columns
            extra_dev.append(dev)
            extra_bytes.append(size)
            others = cols.allreduces()
        gathered_buf, gathered_node = [], []      # all-reduces' uses (arrays), node ids
        for node in others:                       # copies, reduces, all-reduces
            i = node.id
            if node.kind is ALLREDUCE:
                # buffers_of's rule with numpy (an all-reduce over 1,024 devices has 2,048
                # keys): per member device its sums (partial buffer or instance) and its
                # instance.
                r = regions.get(node.region.name)
                devs = np.array(node.devices, dtype=i8)
                partial = np.array(node.in_partial or (False,) * len(devs), dtype=i8)
                got = np.concatenate([(partial * n_regions + r) * n_dev + devs,
                                      r * n_dev + devs]) if r is not None else \
                    np.full(2 * len(devs), -1, dtype=i8)
                gathered_buf.append(got)
                gathered_node.append(i)
                continue
            for key in buffers_of(node, nodes):
                ub.append(number(key))
                un.append(i)
        # Tasks: per class, its buffers' numbers on device 0, and its reads and writes.
        read_by_writer: set[str] = set()
        reads_of_writers: dict[str, set] = {}
        counts, flat, stateful = [], [], []
        for first in classes.first:
            d = first.device
            got = [number(k) for k in buffers_of(first) if k[0] == INSTANCE or
                   k[0] == PARTIAL]
            counts.append(len(got))
            flat += [g - d if g >= 0 else -n_dev for g in got]   # (< 0 on any device)
            stateful.append(bool(first.launch.saved_bytes))
            reads, writes = task_reads_writes(first)
            if writes:
                read_by_writer.update(reads)
                for name in writes:
                    reads_of_writers.setdefault(name, set()).add(reads)
        state_buf = state_node = np.zeros(0, dtype=i8)
        n_before = len(extras)                    # (the extras before the saved states)
        state_dev = state_bytes = np.zeros(0, dtype=i8)
        if any(stateful):
            state_buf, state_node, keys, state_dev, state_bytes = _state_uses(
                nodes, classes, stateful, base + len(staged) + n_before)
            extras += keys
        # The uses are handed out piece by piece (uses()), made then: copies' and reduces',
        # each all-reduce's, the tasks' in chunks, the saved states'.
        out._to_buffers = _BufferNumbers(r_region * n_dev + r_dev, base,
                                         len(staged) + len(extras))
        # (the all-reduces' uses in one piece: 1,890 of GPT-3 2.7B at 1,024 GPUs, each a
        # dozen numpy calls in turn here and in Liveness.of)
        gathered = [np.zeros(0, dtype=i8), *gathered_buf]
        out._before = column_pairs + [(np.array(ub, dtype=i8), np.array(un, dtype=i8)),
                                      (np.concatenate(gathered), np.repeat(
                                          np.array(gathered_node, dtype=i8),
                                          np.array(list(map(len, gathered_buf)), dtype=i8)))]
        out._tasks = _TaskUses(np.array(counts, dtype=i8), np.array(flat, dtype=i8),
                               classes.cls, classes.device, classes.ids, n_dev)
        out._after = [(state_buf, state_node)]
        out.region = np.concatenate([r_region % max(n_regions, 1),
                                     np.full(len(staged) + len(extras), -1, dtype=i8)])
        before = extras[:n_before]                # (staging buffers asked one by one)
        out.device = np.concatenate([r_dev, *extra_dev, np.array([k[2] for k in before],
                                                                 dtype=i8), state_dev])
        out.nbytes = np.concatenate([r_bytes, *extra_bytes,
                                     np.array([own_bytes(k) for k in before], dtype=i8),
                                     state_bytes])
        out.extras = Extras(staged, extras)
        out.key_table = BufferKeyTable(rect_keys, out.extras)
        out.read_by_writer, out.reads_of_writers = read_by_writer, reads_of_writers
        return out

    def uses(self, relabel: np.ndarray | None = None):
        """The uses as (buffers, nodes) pairs of arrays, piece by piece in one order: node
        nodes[k] uses buffer buffers[k] (-1: a buffer the graph does not list). The tasks'
        come in chunks of _TASK_CHUNK tasks: GPT-3 2.7B at 1,024 GPUs has ~6M uses, and the
        ~10 arrays of all of them made in turn were most of the memory model's time (fresh
        pages: docs/design.md "Simulator speed"). `relabel`: None, or per buffer a number
        and a last entry -1; then buffers[k] is relabel[the buffer] (one lookup a use in a
        table composed once, not two), and the tasks' uses of a region's buffers that
        relabel makes -1 on every device are left out (_TaskUses.per_task)."""
        to_buffers = self._to_buffers if relabel is None else \
            _BufferNumbers.relabelled(self._to_buffers, relabel)
        for numbers, nodes in self._before:
            yield to_buffers(numbers), nodes
        # Task t's uses: flat[ptr[c] : ptr[c + 1]] of its class c, each plus its device.
        per_task, first_use, flat = self._tasks.per_task(
            None if relabel is None else to_buffers.table)
        device, ids = self._tasks.device, self._tasks.ids
        for lo in range(0, len(per_task), _TASK_CHUNK):
            hi = lo + _TASK_CHUNK
            per = per_task[lo:hi]
            k = int(per.sum())
            where = np.repeat(first_use[lo:hi] - np.cumsum(per) + per, per) + \
                np.arange(k, dtype=np.int64)
            numbers = flat[where] + np.repeat(device[lo:hi], per)
            numbers[numbers < 0] = -1
            yield to_buffers(numbers), np.repeat(ids[lo:hi], per)
        for numbers, nodes in self._after:
            yield to_buffers(numbers), nodes

    def key(self, b: int) -> tuple:
        """The key (as buffers_of gives it) of buffer b."""
        return self.key_table.keys(np.array([b], dtype=np.int64))[0]

    def keys(self, bs: np.ndarray) -> list[tuple]:
        """The keys of buffers `bs` (ascending), in that order."""
        return self.key_table.keys(bs)


def _state_uses(nodes: list, classes: TaskClasses, stateful: list, first: int) -> tuple:
    """The saved states' uses: (buffers, nodes, keys, devices, bytes). Per task of a class
    whose launch keeps or takes state (`stateful`, per class) with bytes for its color,
    its state_key's number (`first` + the key's index in `keys`) and its id; the distinct
    keys in order of their first task, each one's device and bytes. C maps over the tasks
    (GPT-3 2.7B at 1,024 GPUs under Megatron t=8: 268,288 such tasks, 134,144 keys), the
    launch's part of the key taken once per class, the keys numbered by first use: each
    part of a key as a dense code (names and colors by a dict, once per distinct value,
    devices and bytes by numpy), the parts combined by np.unique, and a key tuple made per
    distinct key only (a dict.setdefault of every task's key tuple was ~0.3 s there)."""
    i8 = np.int64
    held = [None if not keeps else
            ((f.launch.state_from or f.launch.name) + "@state", f.launch.saved_bytes.get)
            for f, keeps in zip(classes.first, stateful)]
    mask = np.array(stateful, dtype=bool)[classes.cls]
    ids = classes.ids[mask]
    names, gets = zip(*map(held.__getitem__, classes.cls[mask].tolist()))
    colors = list(map(_COLOR, map(nodes.__getitem__, ids.tolist())))
    nbytes = list(map(call, gets, colors, repeat(0)))
    some = np.fromiter(map(bool, nbytes), dtype=bool, count=len(nbytes))  # (else no state)
    if not some.all():
        ids = ids[some]
        names, colors, nbytes = (list(compress(x, some)) for x in (names, colors, nbytes))
    devices = classes.device[mask][some]
    n = len(ids)
    size = np.array(nbytes, dtype=i8)
    # A key's code from its parts' (names, colors and bytes by a dict: a value's first
    # position; devices as they are), equal where all parts are equal
    code = _codes(names, n)
    for part, top in ((devices, int(devices.max()) + 1 if n else 1), (_codes(colors, n), n),
                      (_codes(nbytes, n), n)):
        if (int(code.max()) + 1 if n else 1) * top >= 1 << 62:        # (would overflow)
            code = np.unique(code, return_inverse=True)[1].reshape(-1)
        code = code * top + part
    _, first_of, key_of = np.unique(code, return_index=True, return_inverse=True)
    order = np.argsort(first_of)    # keys in order of their first task
    first_at = first_of[order]
    rank = np.empty(len(order), dtype=i8)
    rank[order] = np.arange(len(order), dtype=i8)
    at = first_at.tolist()
    keys = list(zip(repeat(STATE), map(names.__getitem__, at), devices[first_at].tolist(),
                    zip(map(colors.__getitem__, at), map(nbytes.__getitem__, at))))
    return first + rank[key_of.reshape(-1)], ids, keys, devices[first_at], size[first_at]


def _codes(values: list, n: int) -> np.ndarray:
    """Per value of `values` (n, hashable) the position of the first value equal to it."""
    return np.fromiter(map({}.setdefault, values, count()), dtype=np.int64, count=n)


class Extras:
    """BufferUses' extras (staging buffers and saved states) as a sequence of keys: the
    staging buffers of copies taken by columns (`staged`, taskrt/otheruses.py StagingKeys,
    their keys made when asked), then the others (`rest`, a list of keys)."""
    __slots__ = ("staged", "rest")

    def __init__(self, staged: StagingKeys, rest: list):
        self.staged, self.rest = staged, rest

    def __len__(self) -> int:
        return len(self.staged) + len(self.rest)

    def __getitem__(self, k: int) -> tuple:
        n = len(self.staged)
        return self.staged[k] if k < n else self.rest[k - n]

    def __iter__(self):
        return chain(self.staged, self.rest)


class BufferKeyTable:
    """What BufferUses needs to name its buffers (keys as buffers_of gives them), without its
    arrays: per kind its regions' names, (device, rect) lists and their cumulated lengths,
    then the extras. (Liveness keeps this, not the BufferUses: its arrays were ~100 MB of
    GPT-3 2.7B at 1,024 GPUs held through the peak's sweep.)"""
    __slots__ = ("rect_keys", "extras")

    def __init__(self, rect_keys: list, extras: list):
        self.rect_keys, self.extras = rect_keys, extras

    def keys(self, bs: np.ndarray) -> list[tuple]:
        """The keys of buffers `bs` (ascending), in that order."""
        out, base = [], 0
        for kind, names, lists, ends in self.rect_keys:
            total = int(ends[-1]) if len(ends) else 0
            mine = bs[(bs >= base) & (bs < base + total)] - base
            at = np.searchsorted(ends, mine, side="right")
            within = mine - np.concatenate([[0], ends])[at]
            out += [(kind, names[r], lists[r][j][0], None)
                    for r, j in zip(at.tolist(), within.tolist())]
            base += total
        out += [self.extras[b - base] for b in bs[bs >= base].tolist()]
        return out


class _TaskUses:
    """BufferUses' tasks' uses, per class: `counts` of its uses and their numbers on device
    0 (`flat`, the classes' in turn: a region buffer's number less the first task's device,
    a multiple of n_dev, or -n_dev where the graph lists no region of the name); per task
    (TaskClasses' ids, cls, device) its class and device."""
    __slots__ = ("counts", "flat", "cls", "device", "ids", "n_dev")

    def __init__(self, counts, flat, cls, device, ids, n_dev: int):
        self.counts, self.flat, self.cls = counts, flat, cls
        self.device, self.ids, self.n_dev = device, ids, n_dev

    def per_task(self, table: np.ndarray | None = None) -> tuple:
        """(per task its number of uses, its first use's index in flat, flat). `table`: None,
        or per buffer number (region buffers first: (kind * regions + region) * n_dev +
        device) a buffer or -1; then a class's use of a region's buffers of one kind that
        the table makes -1 on every device (of a kept region, or small everywhere: GPT-3
        2.7B at 1,024 GPUs under Megatron t=8, 2.8M of the tasks' 5.4M uses) is left out,
        as are uses of no listed region (-1 on any device): uses of buffer -1 only, which
        the memory model drops, and half the arrays it passes over."""
        counts, flat = self.counts, self.flat
        if table is not None and len(flat):
            n = self.n_dev
            block = flat // n                       # (kind * regions + region), or -1
            keep = block >= 0
            blocks, at = np.unique(block[keep], return_inverse=True)
            numbers = blocks[:, None] * n + np.arange(n, dtype=np.int64)
            keep[keep] = (table[numbers] >= 0).any(axis=1)[at]
            if not keep.all():
                of = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
                counts = np.bincount(of[keep], minlength=len(counts))
                flat = flat[keep]
        ptr = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        return counts[self.cls], ptr[:-1][self.cls], flat


# Tasks per chunk of BufferUses.uses() (a chunk's few MB of temporaries are reused; arrays
# of all ~5M uses of GPT-3 2.7B at 1,024 GPUs were fresh pages each).
_TASK_CHUNK = 1 << 16


class _BufferNumbers:
    """BufferUses' numbering of a region's buffer, (kind * regions + region) * devices +
    device, or base + index of an extra, turned into buffer indices (-1: a buffer the graph
    does not list, or number -1) by one lookup in a table of every number: a region's
    buffer of that kind and device (BufferRects lists a region once, a device once in it:
    one buffer a number), an extra's n_rect + its index, and a last entry -1 for -1. (The
    ~10M uses of GPT-3 2.7B at 1,024 GPUs under Megatron t=8 were ~15 numpy passes each
    by slots, a division and a search; the table has 2 x regions x devices + extras
    entries, 6.3M of int32 there: 25 MB while the memory model is made.)"""

    def __init__(self, numbers: np.ndarray, base: int, n_extra: int):
        """`numbers`: per region buffer (in order), its number (< base)."""
        n_rect = len(numbers)
        kind = np.int32 if n_rect + n_extra < 2 ** 31 else np.int64     # (half the bytes)
        table = np.full(base + n_extra + 1, -1, dtype=kind)
        table[numbers] = np.arange(n_rect, dtype=kind)
        table[base:base + n_extra] = np.arange(n_rect, n_rect + n_extra, dtype=kind)
        self.table = table

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        return self.table[ids]

    @classmethod
    def relabelled(cls, numbers: "_BufferNumbers", relabel: np.ndarray) -> "_BufferNumbers":
        """`numbers` followed by relabel (per buffer a number, a last entry -1 for -1)."""
        out = cls.__new__(cls)
        out.table = relabel[numbers.table]
        return out


def as_buffer_rects(rects) -> BufferRects:
    """`rects` as a BufferRects (a graph's; a plain dict (region, device) -> Rect is copied)."""
    if isinstance(rects, BufferRects):
        return rects
    out = BufferRects()
    per: dict = {}
    for (name, dev), rect in rects.items():
        per.setdefault(name, []).append((dev, rect))
    for name, pairs in per.items():
        out.add_region(name, pairs)
    return out
