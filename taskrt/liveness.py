"""Liveness: which buffers of a TaskGraph are temporaries, who uses them, and the peak memory.

A buffer is an instance or partial-sum buffer of a region on a device, or a reduction copy's
staging buffer. It is *persistent* when its data must outlive the iteration: the region is
initial data of the graph (weights, optimizer state, inputs) or in the `keep` set the caller
reads after run(). Every other buffer is a *temporary*: its data is made and consumed within
one iteration (an activation, its gradient, partial sums, staged reductions). Its users on
its device are the nodes that read or write it (tasks, copies into or out of it, reduces,
all-reduces). The executors allocate a temporary when its first user starts and release it
after its last user; the simulator counts it from the earliest start to the latest end of its
users. Both take the users and the peak from this module, so the modelled peak is the run's.

A point task's saved state (IndexLaunch.saved_bytes: what a forward keeps for its backward
besides regions, e.g. attention's probabilities) is a temporary too, of kind STATE, on the
task's device: its users are the task that keeps it and the task that takes it
(state_from, same color), so it lives from the one's start to the other's end. The
executors hold it in the task context (autograd's graph) and count its bytes; it is always
a temporary (never small: nothing is allocated for it, so freeing costs nothing).

Small buffers (under Settings.min_temporary_bytes, TASKRT_MIN_TEMPORARY_BYTES: the settings
the caller passes, else those resolved when called) are persistent too:
allocating and releasing costs a rank a few microseconds of Python per node, which a CNN of
many small layers on a CPU pays on every task (Inception-v3 --small on 2 ranks: ~15% of the
iteration) while such buffers are a sliver of any device's memory.
"""
from __future__ import annotations

from operator import attrgetter, itemgetter

import numpy as np

from .bufferrects import BufferRects
from .errors import PlanError
from .privilege import Privilege
from .settings import Settings
from .taskclasses import TaskClasses
from .taskgraph import ALLREDUCE, COPY, REDUCE, TASK

INSTANCE, PARTIAL, STAGING, STATE = 0, 1, 2, 3


def is_temporary(region_name: str, nbytes: int, kept, settings: Settings | None = None) -> bool:
    """Whether a buffer of `nbytes` of region `region_name` is freed after its last use."""
    return region_name not in kept and not is_small(nbytes, settings)


def is_small(nbytes, settings: Settings | None = None):
    """Whether a buffer of `nbytes` (a number or an array of them) is too small to free."""
    return nbytes < Settings.resolve(settings).min_temporary_bytes
_READS = (Privilege.READ, Privilege.READ_WRITE)
_READ, _RW = Privilege.READ, Privilege.READ_WRITE
_FIRST, _SECOND, _VOLUME = itemgetter(0), itemgetter(1), attrgetter("volume")


def state_key(node):
    """The key of the saved state a task keeps or takes, or None: (STATE, the keeping
    launch's name + "@state", device, (color, bytes))."""
    launch = node.launch
    held = launch.saved_bytes
    if not held:
        return None
    nbytes = held.get(node.color, 0)
    if not nbytes:
        return None
    return (STATE, (launch.state_from or launch.name) + "@state", node.device,
            (node.color, nbytes))


def own_bytes(key) -> int:
    """Bytes of a buffer that is not a region's instance or partial sums (0 for those)."""
    kind = key[0]
    if kind == STAGING:
        return key[3].nbytes
    if kind == STATE:
        return key[3][1]
    return 0


def buffers_of(node, nodes=None, staged=None) -> tuple:
    """The buffers one node uses, each once: keys (kind, region name, device, copy node)
    where the copy node is set only for a staging buffer (kind STAGING); a task's saved state
    as state_key gives it. A reduce finds the
    copy behind each staged input in `staged` (per input, as its node group records it) or
    else by id in `nodes`."""
    kind = node.kind
    if kind is TASK:
        d = node.device
        out = []
        for req, targets in zip(node.requirements, node.targets):
            name = req.region.name
            if targets is None:
                out.append((INSTANCE, name, d, None))
            else:
                for t in targets:
                    out.append((PARTIAL if t.partial else INSTANCE, name, d, None))
        key = state_key(node)             # None unless it keeps or takes state
        if key is not None:
            out.append(key)
        return tuple(dict.fromkeys(out))
    name = node.region.name
    if kind is COPY:
        if node.reduction:
            return ((PARTIAL if node.from_partial else INSTANCE, name, node.src, None),
                    (STAGING, name, node.dst, node))
        return ((INSTANCE, name, node.src, None), (INSTANCE, name, node.dst, None))
    if kind is REDUCE:
        d = node.device
        out = [(INSTANCE, name, d, None)]
        for j, inp in enumerate(node.inputs):
            if inp.source == "staged":
                out.append((STAGING, name, d,
                            staged[j] if staged is not None else nodes[inp.copy_id]))
            else:
                out.append((PARTIAL if inp.source == "partial" else INSTANCE, name, d, None))
        return tuple(dict.fromkeys(out))
    out = []                                            # all-reduce
    for d, partial in zip(node.devices, node.in_partial or (False,) * len(node.devices)):
        out.append((PARTIAL if partial else INSTANCE, name, d, None))
        out.append((INSTANCE, name, d, None))
    return tuple(dict.fromkeys(out))


def written_by(node) -> tuple:
    """The buffer keys (as buffers_of gives them) a node writes: a task's WD/RW/Red+
    targets, a copy's destination, a reduce's output, an all-reduce's outputs and (it may
    sum in place) its partial inputs."""
    kind = node.kind
    if kind is TASK:
        d, out = node.device, []
        for req, targets in zip(node.requirements, node.targets):
            if req.privilege is _READ:
                continue
            if targets is None:
                out.append((INSTANCE, req.region.name, d, None))
            else:
                for t in targets:
                    out.append((PARTIAL if t.partial else INSTANCE, req.region.name, d, None))
        return tuple(out)
    if kind is COPY:
        return buffers_of(node)[1:]
    if kind is REDUCE:
        return ((INSTANCE, node.region.name, node.device, None),)
    return buffers_of(node)


def alias_sources(graph) -> dict[int, dict[int, tuple[int, ...]]]:
    """Where a task may make a buffer it writes a view of a buffer it reads, instead of
    copying (a reshape, split or contiguous transpose part, an add's backward passing its
    output gradient on): per task node id, per index of a writing requirement, the indices
    of its reading requirements (R, RW) whose buffer the written one may alias.

    The rule (docs/design.md, "Views instead of copies"): task T may store, as the whole of
    buffer B, a view of buffer A that it reads, when
      - T is the only node of the iteration that writes B (no earlier part, no later Red+
        accumulation, RW task, copy or reduce into it),
      - no node after T (in id order) writes A: every writer of A that T's read overlaps is
        a predecessor of T, and nothing writes A again while B may still be read,
      - neither region is initial data (written from outside between runs), and A is not B.
    Then the shared memory is written by nothing from T on, so every reader of B (after T)
    and of A sees what a copy would have held, in any order the executors run ready nodes.
    The storage must also outlive both: the executors' free lists do not take back memory
    another buffer views (taskrt.executor.instances: Buffer.alias, `lent`)."""
    writers: dict = {}
    for node in graph.nodes:
        for key in written_by(node):
            lst = writers.setdefault(key, [])
            if not lst or lst[-1] != node.id:
                lst.append(node.id)
    initial = graph.initial_valid
    out: dict[int, dict[int, tuple[int, ...]]] = {}
    for node in graph.nodes:
        if node.kind is not TASK:
            continue
        i, d = node.id, node.device
        reads = [(k, (INSTANCE, req.region.name, d, None))
                 for k, req in enumerate(node.requirements)
                 if req.privilege in _READS and req.region.name not in initial]
        if not reads:
            continue
        reads = [(k, a) for k, a in reads if writers.get(a, [-1])[-1] <= i]
        for j, (req, targets) in enumerate(zip(node.requirements, node.targets)):
            if req.privilege is _READ or req.region.name in initial:
                continue
            if targets is None:
                b = (INSTANCE, req.region.name, d, None)
            elif len(targets) == 1 and not targets[0].accumulate:
                b = (PARTIAL if targets[0].partial else INSTANCE, req.region.name, d, None)
            else:
                continue
            if writers.get(b) != [i]:
                continue
            ok = tuple(k for k, a in reads if a != b)
            if ok:
                out.setdefault(i, {})[j] = ok
    return out


def buffer_bytes(graph, key) -> int:
    kind, name, dev, copy = key
    if kind == STAGING or kind == STATE:
        return own_bytes(key)
    rects = graph.instance_rects if kind == INSTANCE else graph.partial_rects
    return graph.regions[name].nbytes(rects[name, dev])


def task_reads_writes(node) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Names of the regions a task reads (R, RW) and writes (WD, RW, Red+)."""
    reads, writes = [], []
    for req in node.requirements:
        if req.privilege in _READS:
            reads.append(req.region.name)
        if req.privilege is not _READ:
            writes.append(req.region.name)
    return tuple(reads), tuple(writes)


def results_of(regions, read_by_writers, reads_of_writers) -> set[str]:
    """The regions kept by default: the graph's results (regions no writing task reads: the
    loss, an inference model's outputs) and what the tasks writing them read (the logits and
    labels the loss is computed from). `read_by_writers`: the regions that tasks writing
    something read; `reads_of_writers(name)`: the collections of regions read by the tasks
    that write region `name`."""
    sinks = set(regions).difference(read_by_writers)
    results = set(sinks)
    for name in sinks:
        for reads in reads_of_writers(name):
            results.update(reads)
    return results


def resolve_keep(graph, keep, results: set[str]) -> set[str]:
    """The regions whose buffers persist: initial data, plus "all" regions, or the graph's
    results (keep=None), or the results and the named regions (an iterable of names or
    objects with a .name)."""
    persistent = set(graph.initial_valid)
    if isinstance(keep, str) and keep == "all":
        return persistent | set(graph.regions)
    persistent |= results
    if keep is None:
        return persistent
    if isinstance(keep, str):
        raise PlanError(f"keep='{keep}': pass 'all', None (the graph's results) or a list of "
                        "region names.")
    names = {k if isinstance(k, str) else k.name for k in keep}
    unknown = sorted(names - set(graph.regions))
    if unknown:
        raise PlanError(f"keep: regions {unknown[:8]} are not used by this graph; known "
                        f"regions include {sorted(graph.regions)[:8]}.")
    return persistent | names


class Liveness:
    """Temporaries of a graph (those on `devices`, or all): key, device and bytes, and their
    uses as arrays (use_buf[k] indexes the temporaries, use_node[k] is a node using it; in
    node order, a node's repeated uses of a buffer possibly repeated); `users`: per
    temporary the ids of its users in id order, each once; the bytes of persistent buffers
    per device; the kept regions."""
    __slots__ = ("_keys", "device", "nbytes", "use_buf", "use_node", "persistent", "kept",
                 "_users", "_temps", "_uses")

    def __init__(self, keys: list | None, device: list[int], nbytes: list[int], use_buf,
                 use_node, persistent: dict[int, int], kept: set[str]):
        self._keys, self.device, self.nbytes = keys, device, nbytes
        self.use_buf = np.asarray(use_buf, dtype=np.int64)
        self.use_node = np.asarray(use_node, dtype=np.int64)
        self.persistent, self.kept = persistent, kept
        self._users = None

    @property
    def users(self) -> list[list[int]]:
        """Per temporary, its users' node ids in id order (each once)."""
        if self._users is None:
            n = 1 + int(self.use_node.max()) if len(self.use_node) else 1
            pairs = np.unique(self.use_buf * n + self.use_node)
            bufs, nodes = np.divmod(pairs, n)
            cuts = np.flatnonzero(np.diff(bufs)) + 1
            self._users = [u.tolist() for u in np.split(nodes, cuts)] if len(pairs) else []
        return self._users

    @classmethod
    def of(cls, graph, keep=None, devices=None, settings: Settings | None = None,
           classes: TaskClasses | None = None) -> "Liveness":
        """`classes`: TaskClasses.of(graph.nodes), when the caller has it already."""
        settings = Settings.resolve(settings)
        uses = BufferUses.of(graph, classes)
        results = results_of(graph.regions, uses.read_by_writer,
                             lambda name: uses.reads_of_writers.get(name, ()))
        kept = resolve_keep(graph, keep, results)
        region, device, size = uses.region, uses.device, uses.nbytes
        n_rect = len(size) - len(uses.extras)
        # Temporary: not of a kept region and not small; saved state always.
        region_kept = np.fromiter((name in kept for name in graph.regions), dtype=bool,
                                  count=len(graph.regions))
        name_kept = np.zeros(len(size), dtype=bool)
        name_kept[:n_rect] = region_kept[region[:n_rect]]
        extras = len(uses.extras)
        name_kept[n_rect:] = np.fromiter((k[0] == STAGING and k[1] in kept
                                          for k in uses.extras), dtype=bool, count=extras)
        temporary = ~name_kept & ~is_small(size, settings)
        temporary[n_rect:] |= np.fromiter((k[0] == STATE for k in uses.extras), dtype=bool,
                                          count=extras)
        owned = np.ones(len(size), dtype=bool) if devices is None else \
            np.isin(device, np.array(sorted(set(devices)), dtype=np.int64))
        # Persistent: an owned region buffer that is no temporary, used or not (staging
        # buffers exist when used, and each is used).
        persistent: dict[int, int] = {}
        stay = np.flatnonzero(owned & ~temporary)
        if len(stay):
            per = np.zeros(int(device.max()) + 1, dtype=np.int64)
            np.add.at(per, device[stay], size[stay])
            devs, first = np.unique(device[stay], return_index=True)
            for d in devs[np.argsort(first)].tolist():      # in the buffers' order
                persistent[d] = int(per[d])
        buf, node = uses.use_buf, uses.use_node
        used = np.zeros(len(size) + 1, dtype=bool)            # [-1]: no buffer
        used[buf] = True
        temps = np.flatnonzero(owned & temporary & used[:-1])  # a temporary nobody uses: none
        temp_of = np.full(len(size) + 1, -1, dtype=np.int64)      # [-1]: no buffer
        temp_of[temps] = np.arange(len(temps), dtype=np.int64)
        # The temporaries' uses, chunk by chunk (no temporary array of all uses).
        bufs, nodes = [], []
        for lo in range(0, len(buf), _USE_CHUNK):
            got = temp_of[buf[lo:lo + _USE_CHUNK]]
            mine = got >= 0
            bufs.append(got[mine])
            nodes.append(node[lo:lo + _USE_CHUNK][mine])
        i8 = np.int64
        live = cls(None, device[temps].tolist(), size[temps].tolist(),
                   np.concatenate(bufs) if bufs else np.zeros(0, i8),
                   np.concatenate(nodes) if nodes else np.zeros(0, i8), persistent, kept)
        # Only keys() is asked of `uses` from here: its use arrays go (they were the
        # largest arrays of a graph's memory model, and the peak's follow).
        uses.use_buf = uses.use_node = None
        live._temps, live._uses = temps, uses
        return live

    @property
    def keys(self) -> list:
        """Per temporary, its key (as buffers_of gives it)."""
        if self._keys is None:
            self._keys = self._uses.keys(self._temps)
        return self._keys

    def peak(self, start, end) -> dict[int, int]:
        """Peak bytes per device when node i runs from start[i] to end[i]."""
        return peak_bytes_of_users(self.use_buf, self.use_node, self.device, self.nbytes,
                                   start, end, self.persistent)

    def peak_in_id_order(self) -> dict[int, int]:
        """The peak when nodes run one at a time in id order (as LocalExecutor runs them)."""
        n = 1 + (int(self.use_node.max()) if len(self.use_node) else -1)
        return self.peak(np.arange(n), np.arange(1, n + 1))


class BufferUses:
    """Every buffer of a graph and its nodes' uses of them, as arrays.

    Buffers: the regions' instance and partial-sum buffers (graph.instance_rects,
    partial_rects, in that order), then the staging buffers and saved states in the order
    of their first use (`extras`, keys as buffers_of gives them); per buffer its region
    index (`region`, -1 for an extra; into graph.regions), device and bytes. Uses:
    use_node[k] uses buffer use_buf[k] (-1: a buffer the graph does not list), in no
    particular order, a node's use of a buffer possibly repeated. And what results_of
    needs: the regions read (R, RW) by tasks that write something, and per region
    written the tuples of regions its writers read.

    Tasks are taken per class (taskrt/taskclasses.py): buffers_of and task_reads_writes of
    a class's first task give every task of the class its buffers, on its own device,
    with numpy; saved state is asked per task of a launch that has some. Other nodes are
    asked one by one (buffers_of): copies, reduces and all-reduces are few in most graphs."""
    __slots__ = ("region", "device", "nbytes", "extras", "use_buf", "use_node",
                 "read_by_writer", "reads_of_writers", "_rect_keys")

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
        per_list: dict = {}     # id(pairs) -> (pairs, devices, volumes, devices 0, 1, ...?)
        # Per (kind, region): its first buffer's index, its count, and whether its devices
        # are 0, 1, ... in order (then device d's buffer is the first's index + d).
        slot_start = np.full(2 * n_regions, -1, dtype=i8)
        slot_len = np.zeros(2 * n_regions, dtype=i8)
        slot_direct = np.ones(2 * n_regions, dtype=bool)
        done = 0
        for kind, rects in ((INSTANCE, graph.instance_rects), (PARTIAL, graph.partial_rects)):
            names, lists, at, dev, vol, direct = [], [], [], [], [], []
            for name, pairs in as_buffer_rects(rects).per_region():
                known = per_list.get(id(pairs))
                if known is None or known[0] is not pairs:
                    devs = np.fromiter(map(_FIRST, pairs), dtype=i8, count=len(pairs))
                    known = per_list[id(pairs)] = (
                        pairs, devs, np.fromiter(map(_VOLUME, map(_SECOND, pairs)), dtype=i8,
                                                 count=len(pairs)),
                        bool((devs == np.arange(len(devs))).all()))
                names.append(name)
                lists.append(pairs)
                at.append(regions[name])
                dev.append(known[1])
                vol.append(known[2])
                direct.append(known[3])
            counts = np.fromiter(map(len, lists), dtype=i8, count=len(lists))
            slots = np.array(at, dtype=i8) + kind * n_regions
            slot_len[slots] = counts
            slot_start[slots] = done + np.cumsum(counts) - counts
            slot_direct[slots] = np.array(direct, dtype=bool)
            done += int(counts.sum())
            rect_keys.append((kind, names, lists, np.cumsum(counts)))
            at = np.repeat(np.array(at, dtype=i8), counts)
            r_region.append(at + kind * n_regions)
            r_dev.append(np.concatenate(dev) if dev else np.zeros(0, dtype=i8))
            r_bytes.append(itemsize[at] * (np.concatenate(vol) if vol else
                                           np.zeros(0, dtype=i8)))
        r_region, r_dev, r_bytes = (np.concatenate(x) for x in (r_region, r_dev, r_bytes))
        others = [nodes[i] for i in classes.others.tolist()]
        top = int(r_dev.max()) if len(r_dev) else -1
        if len(classes.device):
            top = max(top, int(classes.device.max()))
        for node in others:
            top = max(top, max(node.devices, default=-1))
        n_dev = top + 1
        extras: list = []
        extra_ids: dict = {}
        base = 2 * n_regions * n_dev              # extras are numbered base + their index

        def number(key) -> int:
            kind = key[0]
            if kind == INSTANCE or kind == PARTIAL:
                r = regions.get(key[1])
                return -1 if r is None else (kind * n_regions + r) * n_dev + key[2]
            e = extra_ids.get(key)
            if e is None:
                e = extra_ids[key] = len(extras)
                extras.append(key)
            return base + e
        ub: list[int] = []
        un: list[int] = []
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
        cls_of = classes.cls
        per_task = np.array(counts, dtype=i8)[cls_of] if len(counts) else np.zeros(0, i8)
        ptr = np.zeros(len(counts) + 1, dtype=i8)
        np.cumsum(counts, out=ptr[1:])
        state_buf, state_node = [], []
        if any(stateful):
            # state_key per task, with its launch's part taken once per class.
            held = [None if not keeps else
                    ((f.launch.state_from or f.launch.name) + "@state", f.launch.saved_bytes)
                    for f, keeps in zip(classes.first, stateful)]
            mask = np.array(stateful, dtype=bool)[cls_of]
            for i, c, d in zip(classes.ids[mask].tolist(), cls_of[mask].tolist(),
                               classes.device[mask].tolist()):
                color = nodes[i].color
                state_name, saved = held[c]
                nbytes = saved.get(color, 0)
                if nbytes:                  # (else it keeps or takes no state)
                    key = (STATE, state_name, d, (color, nbytes))
                    e = extra_ids.get(key)
                    if e is None:
                        e = extra_ids[key] = len(extras)
                        extras.append(key)
                    state_buf.append(base + e)
                    state_node.append(i)
        # The uses, in this order: copies' and reduces', all-reduces', tasks', saved
        # states'; each piece's numbers made buffer indices as it is written into the two
        # arrays (the tasks' in chunks: no array of all uses but the two).
        n_rect = len(r_dev)
        to_buffers = _BufferNumbers(slot_start, slot_len, slot_direct, r_region, r_dev, n_dev,
                                    base, n_rect)
        total = int(per_task.sum())
        n_uses = len(ub) + sum(map(len, gathered_buf)) + total + len(state_buf)
        use_buf, use_node = np.empty(n_uses, dtype=i8), np.empty(n_uses, dtype=i8)
        at = 0

        def put(numbers: np.ndarray, node_ids) -> None:
            nonlocal at
            k = len(numbers)
            use_buf[at:at + k] = to_buffers(numbers)
            use_node[at:at + k] = node_ids
            at += k
        put(np.array(ub, dtype=i8), np.array(un, dtype=i8))
        for got, i in zip(gathered_buf, gathered_node):
            put(got, i)
        # Task t's uses: flat[ptr[c] : ptr[c + 1]] of its class c, each plus its device.
        flat = np.array(flat, dtype=i8)
        first_use = ptr[:-1][cls_of]
        for lo in range(0, len(cls_of), _TASK_CHUNK):
            hi = lo + _TASK_CHUNK
            per = per_task[lo:hi]
            k = int(per.sum())
            where = np.repeat(first_use[lo:hi] - np.cumsum(per) + per, per) + \
                np.arange(k, dtype=i8)
            numbers = flat[where] + np.repeat(classes.device[lo:hi], per)
            numbers[numbers < 0] = -1
            put(numbers, np.repeat(classes.ids[lo:hi], per))
        put(np.array(state_buf, dtype=i8), np.array(state_node, dtype=i8))
        out.use_buf, out.use_node = use_buf, use_node
        out.region = np.concatenate([r_region % max(n_regions, 1),
                                     np.full(len(extras), -1, dtype=i8)])
        out.device = np.concatenate([r_dev, np.array([k[2] for k in extras], dtype=i8)])
        out.nbytes = np.concatenate([r_bytes,
                                     np.array([own_bytes(k) if k[0] == STATE else
                                               k[3].nbytes for k in extras], dtype=i8)])
        out.extras, out._rect_keys = extras, rect_keys
        out.read_by_writer, out.reads_of_writers = read_by_writer, reads_of_writers
        return out

    def key(self, b: int) -> tuple:
        """The key (as buffers_of gives it) of buffer b."""
        return self.keys(np.array([b], dtype=np.int64))[0]

    def keys(self, bs: np.ndarray) -> list[tuple]:
        """The keys of buffers `bs` (ascending), in that order."""
        out, base = [], 0
        for kind, names, lists, ends in self._rect_keys:
            total = int(ends[-1]) if len(ends) else 0
            mine = bs[(bs >= base) & (bs < base + total)] - base
            at = np.searchsorted(ends, mine, side="right")
            within = mine - np.concatenate([[0], ends])[at]
            out += [(kind, names[r], lists[r][j][0], None)
                    for r, j in zip(at.tolist(), within.tolist())]
            base += total
        out += [self.extras[b - base] for b in bs[bs >= base].tolist()]
        return out


# Tasks per chunk when BufferUses writes their uses (a chunk's few MB of temporaries are
# reused; arrays of all ~5M uses of GPT-3 2.7B at 1,024 GPUs were fresh pages each).
_TASK_CHUNK = 1 << 16
_USE_CHUNK = 1 << 20     # uses per chunk when Liveness.of picks the temporaries'


class _BufferNumbers:
    """BufferUses' numbering of a region's buffer, (kind * regions + region) * devices +
    device, or base + index of an extra, turned into buffer indices (-1: a buffer the graph
    does not list): at once where the region's devices are 0, 1, ...; else by a search
    among those regions' buffers (its table made on first need)."""

    def __init__(self, slot_start, slot_len, slot_direct, r_region, r_dev, n_dev: int,
                 base: int, n_rect: int):
        self.slot_start, self.slot_len, self.slot_direct = slot_start, slot_len, slot_direct
        self.r_region, self.r_dev, self.n_dev = r_region, r_dev, n_dev
        self.base, self.n_rect = base, n_rect
        self._search = None

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        base = self.base
        buf = np.full(len(ids), -1, dtype=np.int64)
        of_rect = np.flatnonzero((ids >= 0) & (ids < base))
        slot, dev = np.divmod(ids[of_rect], max(self.n_dev, 1))
        direct = self.slot_direct[slot]
        hit = direct & (dev < self.slot_len[slot])
        buf[of_rect[hit]] = self.slot_start[slot[hit]] + dev[hit]
        rest = of_rect[~direct]
        if len(rest):
            if self._search is None:
                among = np.flatnonzero(~self.slot_direct[self.r_region])
                numbers = (self.r_region * self.n_dev + self.r_dev)[among]
                order = np.argsort(numbers, kind="stable")
                self._search = (among[order], numbers[order])
            buffers, ordered = self._search
            pos = np.minimum(np.searchsorted(ordered, ids[rest]), len(ordered) - 1)
            found = ordered[pos] == ids[rest]
            buf[rest[found]] = buffers[pos[found]]
        of_extra = ids >= base
        buf[of_extra] = self.n_rect + ids[of_extra] - base
        return buf


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


def peak_bytes(device, nbytes, users, start, end, persistent) -> dict[int, int]:
    """Persistent bytes plus the most temporaries live at once, per device. Temporary k lives
    from the earliest start to the latest end of its users (node ids `users[k]`, each list
    non-empty); see peak_bytes_of_users."""
    lengths = np.fromiter((len(u) for u in users), dtype=np.int64, count=len(users))
    flat = np.fromiter((i for u in users for i in u), dtype=np.int64, count=int(lengths.sum()))
    return peak_bytes_of_users(np.repeat(np.arange(len(users), dtype=np.int64), lengths), flat,
                               device, nbytes, start, end, persistent)


def peak_bytes_of_users(user_buf, user_node, device, nbytes, start, end, persistent
                        ) -> dict[int, int]:
    """peak_bytes with the temporaries' uses as pairs: node user_node[i] uses buffer
    user_buf[i], an index into `device` and `nbytes` (buffers without uses are not
    allocated). At equal times releases come first (a buffer freed as a node ends is
    reusable by the next one), except where a user ending last takes no time: that one still
    needs the buffer then. Linear in the uses but for one sort of the allocation events."""
    out = dict(persistent)
    user_buf = np.asarray(user_buf, dtype=np.int64)
    if not len(user_buf):
        return out
    user_node = np.asarray(user_node, dtype=np.int64)
    starts = np.asarray(start, dtype=np.float64)[user_node]
    ends = np.asarray(end, dtype=np.float64)[user_node]
    n = len(nbytes)
    born = np.full(n, np.inf)
    np.minimum.at(born, user_buf, starts)
    dies = np.full(n, -np.inf)
    np.maximum.at(dies, user_buf, ends)
    # Released after the allocations at its time when a user ending last takes no time.
    late = np.zeros(n, dtype=bool)
    late[user_buf[(ends == dies[user_buf]) & (starts == ends)]] = True
    used = np.zeros(n, dtype=bool)
    used[user_buf] = True
    ids = np.flatnonzero(used)
    born, dies, late = born[ids], dies[ids], late[ids]
    dev = np.asarray(device, dtype=np.int64)[ids]
    size = np.asarray(nbytes, dtype=np.int64)[ids]
    # Events: (device, time, order, +-bytes); order 0 release, 1 allocate, 2 late release.
    times = np.concatenate([born, dies])
    order = np.concatenate([np.ones(len(born), dtype=np.int8),
                            np.where(late, 2, 0).astype(np.int8)])
    devs = np.concatenate([dev, dev])
    delta = np.concatenate([size, -size])
    idx = np.lexsort((order, times, devs))
    live = np.cumsum(delta[idx])          # each device's events sum to 0: per-device sums
    devs = devs[idx]
    bounds = np.flatnonzero(np.diff(devs)) + 1
    firsts = np.concatenate([[0], bounds])
    peaks = np.maximum.reduceat(live, firsts)
    for d, p in zip(devs[firsts].tolist(), peaks.tolist()):
        out[d] = out.get(d, 0) + max(int(p), 0)
    return out
