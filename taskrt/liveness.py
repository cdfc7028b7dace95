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

The parts: taskrt/bufferkeys.py says which buffers (keys) a node uses and writes;
taskrt/bufferuses.py lists a whole graph's buffers and uses as arrays, per task class; this
module picks the temporaries and the kept regions (Liveness) and sweeps the peak
(peak_bytes_of_users). The simulator, which needs only the peak on one timeline, takes
each temporary's lifetime on it rather than its uses (Liveness.on_timeline: no arrays of
all uses, nothing sorted by node).
"""
from __future__ import annotations

from operator import itemgetter

import numpy as np

# Buffer keys (bufferkeys.py) and the uses as arrays (bufferuses.py), importable from here
# as before they were split out.
from .bufferkeys import (INSTANCE, PARTIAL, STAGING, STATE, alias_sources,  # noqa: F401
                         buffer_bytes, buffers_of, own_bytes, state_key, task_reads_writes,
                         written_by)
from .bufferuses import BufferUses, as_buffer_rects  # noqa: F401
from .errors import PlanError
from .settings import Settings
from .taskclasses import TaskClasses

_KIND, _NAME = itemgetter(0), itemgetter(1)          # of a buffer key


def is_temporary(region_name: str, nbytes: int, kept, settings: Settings | None = None) -> bool:
    """Whether a buffer of `nbytes` of region `region_name` is freed after its last use."""
    return region_name not in kept and not is_small(nbytes, settings)


def is_small(nbytes, settings: Settings | None = None):
    """Whether a buffer of `nbytes` (a number or an array of them) is too small to free."""
    return nbytes < Settings.resolve(settings).min_temporary_bytes



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
    """Temporaries of a graph (those on `devices`, or all): key, device and bytes (lists;
    device_array and nbytes_array as int64 arrays), and their uses as arrays (use_buf[k]
    indexes the temporaries, use_node[k] is a node using it; in node order, a node's
    repeated uses of a buffer possibly repeated); `users`: per temporary the ids of its
    users in id order, each once; the bytes of persistent buffers per device; the kept
    regions. (The lists are made on first use: the simulator's peak takes the arrays, and
    GPT-3 2.7B at 1,024 GPUs has 1.7M temporaries.)"""
    __slots__ = ("_keys", "device_array", "nbytes_array", "_device", "_nbytes", "use_buf",
                 "use_node", "persistent", "kept", "_users", "_temps", "_key_table")

    def __init__(self, keys: list | None, device, nbytes, use_buf, use_node,
                 persistent: dict[int, int], kept: set[str]):
        self._keys, self._device, self._nbytes = keys, None, None
        self.device_array = np.asarray(device, dtype=np.int64)
        self.nbytes_array = np.asarray(nbytes, dtype=np.int64)
        self.use_buf = np.asarray(use_buf, dtype=np.int64)
        self.use_node = np.asarray(use_node, dtype=np.int64)
        self.persistent, self.kept = persistent, kept
        self._users = None

    @property
    def device(self) -> list[int]:
        """Per temporary, its device."""
        if self._device is None:
            self._device = self.device_array.tolist()
        return self._device

    @property
    def nbytes(self) -> list[int]:
        """Per temporary, its bytes."""
        if self._nbytes is None:
            self._nbytes = self.nbytes_array.tolist()
        return self._nbytes

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
        c = _Candidates(graph, keep, devices, settings, classes)
        bufs, nodes = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
        for got, node in c.uses():
            mine = got >= 0
            bufs.append(got[mine])
            nodes.append(node[mine])
        use_buf, use_node = np.concatenate(bufs), np.concatenate(nodes)
        del bufs, nodes
        used = np.zeros(len(c.index), dtype=bool)
        used[use_buf] = True
        temps = c.index[used]
        if len(temps) < len(c.index):
            use_buf = (np.cumsum(used) - 1)[use_buf]
        return c.liveness(temps, use_buf, use_node)

    @classmethod
    def on_timeline(cls, graph, start, end, keep=None, devices=None,
                    settings: Settings | None = None, classes: TaskClasses | None = None
                    ) -> tuple["Liveness", np.ndarray, np.ndarray]:
        """(live, start', end'): Liveness.of(graph, ...)'s temporaries (keys, devices, bytes,
        persistent and kept the same), each used by pseudo-nodes standing for its lifetime
        on the timeline (node i from start[i] to end[i]) instead of by its nodes: one from
        its users' earliest start to their latest end, and where one of the users ending
        last takes no time, another taking none then (pseudo-node k runs from start'[k] to
        end'[k]: lifetime_users). The model's peak depends on nothing
        else (peak_bytes_of_users): live.peak(start', end') is Liveness.of(graph,
        ...).peak(start, end), without the uses as arrays (GPT-3 2.7B at 1,024 GPUs under
        Megatron t=8: 6.7M uses of 1.7M temporaries, gathered, joined and sorted by node
        for the peak's sweep: ~1 s of the simulation's)."""
        c = _Candidates(graph, keep, devices, settings, classes)
        used, born, dies, late = lifetimes(c.uses(), len(c.index), start, end)
        use_buf, use_node, start, end = lifetime_users(born[used], dies[used], late[used])
        return c.liveness(c.index[used], use_buf, use_node), start, end

    @property
    def keys(self) -> list:
        """Per temporary, its key (as buffers_of gives it)."""
        if self._keys is None:
            self._keys = self._key_table.keys(self._temps)
        return self._keys

    def peak(self, start, end) -> dict[int, int]:
        """Peak bytes per device when node i runs from start[i] to end[i]."""
        return peak_bytes_of_users(self.use_buf, self.use_node, self.device_array,
                                   self.nbytes_array, start, end, self.persistent)

    def peak_in_id_order(self) -> dict[int, int]:
        """The peak when nodes run one at a time in id order (as LocalExecutor runs them)."""
        n = 1 + (int(self.use_node.max()) if len(self.use_node) else -1)
        return self.peak(np.arange(n), np.arange(1, n + 1))


class _Candidates:
    """Liveness.of's choice of temporaries before their uses are looked at: the graph's
    BufferUses, the persistent bytes per device, the kept regions and the candidates
    (owned temporaries, `index` into the buffers; a candidate nobody uses is none)."""
    __slots__ = ("buffer_uses", "index", "device", "size", "persistent", "kept")

    def __init__(self, graph, keep, devices, settings: Settings | None,
                 classes: TaskClasses | None):
        settings = Settings.resolve(settings)
        uses = self.buffer_uses = BufferUses.of(graph, classes)
        results = results_of(graph.regions, uses.read_by_writer,
                             lambda name: uses.reads_of_writers.get(name, ()))
        kept = self.kept = resolve_keep(graph, keep, results)
        region, device, size = uses.region, uses.device, uses.nbytes
        self.device, self.size = device, size
        n_rect = len(size) - len(uses.extras)
        # Temporary: not of a kept region and not small; saved state always.
        region_kept = np.fromiter((name in kept for name in graph.regions), dtype=bool,
                                  count=len(graph.regions))
        name_kept = np.zeros(len(size), dtype=bool)
        name_kept[:n_rect] = region_kept[region[:n_rect]]
        # (The staging buffers of copies taken by columns, the first extras, by their
        # regions' indices: a tensor-parallel graph has one per reduction copy, 1.1M of
        # GPT-3 2.7B at 1,024 GPUs under Megatron t=8; the other extras per key in C maps.)
        staged, rest = uses.extras.staged, uses.extras.rest
        n_staged = len(staged)
        kind = np.full(len(uses.extras), STAGING, dtype=np.int64)
        kind[n_staged:] = np.fromiter(map(_KIND, rest), dtype=np.int64, count=len(rest))
        name_kept[n_rect:n_rect + n_staged] = staged.kept(region_kept, kept)
        name_kept[n_rect + n_staged:] = (kind[n_staged:] == STAGING) & np.fromiter(
            map(kept.__contains__, map(_NAME, rest)), dtype=bool, count=len(rest))
        temporary = ~name_kept & ~is_small(size, settings)
        temporary[n_rect:] |= kind == STATE
        owned = np.ones(len(size), dtype=bool) if devices is None else \
            np.isin(device, np.array(sorted(set(devices)), dtype=np.int64))
        # Persistent: an owned region buffer that is no temporary, used or not (staging
        # buffers exist when used, and each is used).
        self.persistent = _per_device(device, size, np.flatnonzero(owned & ~temporary))
        self.index = np.flatnonzero(owned & temporary)

    def uses(self):
        """The uses of candidates, piece by piece as BufferUses.uses hands them out, each
        buffer as its index among the candidates (-1: none)."""
        kind = np.int32 if len(self.index) < 2 ** 31 else np.int64    # (half the bytes)
        candidate_of = np.full(len(self.size) + 1, -1, dtype=kind)    # [-1]: no buffer
        candidate_of[self.index] = np.arange(len(self.index), dtype=kind)
        return self.buffer_uses.uses(candidate_of)

    def liveness(self, temps: np.ndarray, use_buf, use_node) -> "Liveness":
        """The Liveness of temporaries `temps` (buffers), with those uses."""
        live = Liveness(None, self.device[temps], self.size[temps], use_buf, use_node,
                        self.persistent, self.kept)
        live._temps, live._key_table = temps, self.buffer_uses.key_table  # (not its arrays)
        return live


def _per_device(device: np.ndarray, size: np.ndarray, at: np.ndarray) -> dict[int, int]:
    """{device: bytes} of buffers `at` (those listed, in the order of their first buffer)."""
    if not len(at):
        return {}
    dev = device[at]
    top = int(dev.max()) + 1
    per = np.zeros(top, dtype=np.int64)
    np.add.at(per, dev, size[at])
    first = np.full(top, len(at), dtype=np.int64)
    np.minimum.at(first, dev, np.arange(len(at), dtype=np.int64))
    devs = np.flatnonzero(first < len(at))
    devs = devs[np.argsort(first[devs], kind="stable")]
    return dict(zip(devs.tolist(), per[devs].tolist()))


def lifetimes(pieces, n: int, start, end) -> tuple:
    """(used, born, dies, late) of buffers 0..n-1 whose uses are `pieces`, (buffers, nodes)
    pairs of arrays (buffer -1: none; node i runs from start[i] to end[i]): per buffer
    whether some node uses it, its users' earliest start and latest end, and whether a
    user ending last takes no time (peak_bytes_of_users: it is then released after the
    allocations at its time). Per piece a few numpy passes over its uses (the most of all
    users' zero-time ends equal to the latest end: late). Where no node ends before it
    starts (nor at NaN), a buffer is used exactly when its earliest start is at most its
    latest end (a user's start <= its end; nobody's: inf > -inf): no pass marking the
    used ones over all uses."""
    start = np.asarray(start, dtype=np.float64)
    end = np.asarray(end, dtype=np.float64)
    ordered = bool((start <= end).all())
    # (Entry n takes the uses of buffer -1, as numpy indexes it: no uses filtered out.)
    used = None if ordered else np.zeros(n + 1, dtype=bool)
    born = np.full(n + 1, np.inf)
    dies = np.full(n + 1, -np.inf)
    zero_end = np.full(n + 1, -np.inf)      # per buffer, its users' latest end taking no time
    for buf, node in pieces:
        starts, ends = start[node], end[node]
        if not ordered:
            used[buf] = True
        np.minimum.at(born, buf, starts)
        np.maximum.at(dies, buf, ends)
        zero = starts == ends
        if zero.any():
            np.maximum.at(zero_end, buf[zero], ends[zero])
    born, dies = born[:n], dies[:n]
    used = born <= dies if ordered else used[:n]
    return used, born, dies, used & (zero_end[:n] == dies)


def lifetime_users(born, dies, late) -> tuple:
    """(use_buf, use_node, start, end): pseudo-nodes standing for the lifetimes of buffers
    (per buffer its users' earliest start and latest end, and whether a user ending last
    takes no time: lifetimes'), as Liveness.on_timeline describes them, with their
    timeline."""
    k = len(born)
    late = np.flatnonzero(late)
    return (np.concatenate([np.arange(k, dtype=np.int64), late]),
            np.arange(k + len(late), dtype=np.int64),
            np.concatenate([born, dies[late]]), np.concatenate([dies, dies[late]]))


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
    # Released after the allocations at its time when a user ending last takes no time.
    used, born, dies, late = lifetimes([(user_buf, user_node)], len(nbytes), start, end)
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
