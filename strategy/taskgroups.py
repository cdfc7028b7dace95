"""What the simulator needs of one launch's point tasks (a task node group,
taskrt/nodegroups.py), computed over the group's tasks as arrays (strategy/delta.py's
SimulationSession asks it for each new task group).

The point tasks of a launch differ only in their rects and devices. A task's cost key, its
buffers but for the device and the regions it reads and writes are functions of its class
(taskrt/taskclasses.py's class_key, with the launch's cost tag for the launch: a template,
made of the class's first task); its duration of (template, device spec), its resource of
its device, its buffers of (template, device), and saved state (keyed by its color) is
added per task. A group's classes are found column by column over its tasks
(taskclasses.classes_of_run: C loops per requirement, a key per distinct class, not
class_key per task), so per group the Python per task is, for a launch that keeps state,
its state buffer; durations, resource and buffer ids are gathers by template and device.
What does not depend on saved state is a function of the tasks' templates and devices, so
it is kept per such shape (TaskGroups._shapes: an LSTM's step launches of one config share
it; NMT @16 finds 85% of its new task groups' shapes known), the state put in per task.
A task group rebuilt with the same task objects (the planner gives a launch's tasks new
predecessors but keeps the nodes, and a search coming back to a config gets the same task
objects back) reuses its arrays, kept for the last few sets of nodes of each group id:
they do not depend on predecessors.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter

import numpy as np

from taskrt.liveness import STATE, buffers_of, own_bytes, state_key, task_reads_writes
from taskrt.taskclasses import class_key, classes_of_run

from .listsched import csr
from .simulator import NO_HOST

_DEVICE = attrgetter("device")
KEPT_PER_GROUP = 8       # sets of task nodes whose arrays a group id keeps (TaskGroups.sim)
SHAPES_KEPT = 4096       # (templates, devices) shapes whose arrays TaskGroups keeps
_I8 = np.int64
# A group's templates from its classes found column by column (classes_of_run). Off: a
# class_key per task, kept per node (the oracle of tests/strategy/test_group_classes.py).
RUN_CLASSES = True


@dataclass(eq=False, slots=True)
class GroupSim:
    """What the simulator needs of one node group, as arrays aligned with its nodes."""
    dur: np.ndarray
    res_counts: np.ndarray
    res_ids: np.ndarray
    buf_counts: np.ndarray
    buf_ids: np.ndarray
    read_by_writers: frozenset     # regions read (R, RW) by tasks that write something
    reads_of_writers: dict         # region written -> regions read by the tasks writing it
    host: tuple | None             # HOST_ARRAYS of its nodes, or None without host costs


# Host phases (simulator.timeline's `host`), only when the machine model has host costs.
HOST_ARRAYS = ("pre_dur", "pre_counts", "pre_ids", "post_dur", "post_counts", "post_ids")


def host_arrays(phases) -> tuple:
    """Per-node host phases (seconds, ids, seconds, ids) as the six HOST_ARRAYS."""
    n = len(phases)
    return (np.fromiter((p[0] for p in phases), dtype=np.float64, count=n),
            np.fromiter((len(p[1]) for p in phases), dtype=_I8, count=n),
            np.fromiter((x for p in phases for x in p[1]), dtype=_I8),
            np.fromiter((p[2] for p in phases), dtype=np.float64, count=n),
            np.fromiter((len(p[3]) for p in phases), dtype=_I8, count=n),
            np.fromiter((x for p in phases for x in p[3]), dtype=_I8))


@dataclass(eq=False, slots=True)
class _Template:
    """A task class: its buffers' (kind, region name) but for the device (saved state not
    included), the regions it reads when it writes something, what it writes (None:
    nothing), and its duration per device spec."""
    pattern: tuple
    reads: tuple
    writes: tuple | None
    durations: dict = field(default_factory=dict)
    # Per pattern entry and device: buffer id, -1: unknown (TaskGroups._pattern_ids's)
    ids: np.ndarray | None = None


class TaskGroups:
    """Task groups' GroupSims for one SimulationSession's tables (its buffer ids and
    resource ids; made again when the session starts its tables again)."""

    def __init__(self, machine_model, timer, resources, buffers):
        # Nothing of the session that owns these (a bound method of it was a reference cycle
        # that kept every dropped session alive in a search: strategy/search.py, "Garbage collection")
        self.machine_model, self.timer = machine_model, timer
        self.resources, self.buffers = resources, buffers
        self._index: dict = {}               # template key -> index in _templates
        self._templates: list[_Template] = []
        self._pattern_ids: dict = {}         # a template's pattern -> its ids (_Template)
        self.class_of: dict = {}             # task node -> its template's index (oracle)
        # Group id -> {its nodes' ids: (the nodes, their GroupSim)}, the last KEPT_PER_GROUP
        # sets of nodes (a search goes back and forth between a few configs).
        self._last: dict = {}
        n = buffers.num_devices
        self._compute = np.full(n, -1, dtype=_I8)   # per device: compute resource id
        self._spec = np.full(n, -1, dtype=_I8)      # per device: index in _specs
        self._specs: list = []
        self._hosts: dict = {}               # device -> a task's host phases there
        self._shapes: dict = {}              # (templates, devices) -> _shape_arrays
        # (regions read by writers, reads of writers) by value -> the one pair of objects
        # all shapes of that value share: SimulationSession._put_block compares them by
        # identity (a new config's launch reads and writes the regions the old one did)
        self._reads: dict = {}

    def forget_nodes(self) -> None:
        """Drop the per-node template cache (bounded like the session's other tables)."""
        self.class_of = {}

    def _template(self, node, key: tuple | None = None) -> int:
        """The index of the template of task `node` (`key`: its class_key, else asked)."""
        key = (node.launch.cost_tag,) + (class_key(node) if key is None else key)[1:]
        t = self._index.get(key)
        if t is None:
            bufs = buffers_of(node)
            if node.launch.saved_bytes and bufs and bufs[-1][0] == STATE:
                bufs = bufs[:-1]
            reads, writes = task_reads_writes(node)
            t = self._index[key] = len(self._templates)
            pattern = tuple([(b[0], b[1]) for b in bufs])
            tpl = _Template(pattern, reads if writes else (), writes or None)
            # (buffer ids are a function of the pattern and the device: one table per
            # pattern, shared by its templates, e.g. an operator's configs reading and
            # writing the same regions)
            tpl.ids = self._pattern_ids.get(pattern)
            if tpl.ids is None:
                tpl.ids = self._pattern_ids[pattern] = np.full(
                    (len(pattern), self.buffers.num_devices), -1, dtype=_I8)
            self._templates.append(tpl)
        return t

    def _devices(self, devices: np.ndarray) -> None:
        """Spec and compute resource of each of these devices, where not known yet."""
        new = devices[self._spec[devices] < 0]
        if not len(new):
            return
        for d in np.unique(new).tolist():
            spec = self.machine_model.device(d)
            try:
                s = self._specs.index(spec)
            except ValueError:
                s = len(self._specs)
                self._specs.append(spec)
            self._spec[d] = s
            self._compute[d] = self.resources.id(self.timer.compute(d))

    def _buffer_ids(self, tpl: _Template, devs: np.ndarray) -> np.ndarray:
        """(tasks, pattern entries): the template's buffer ids on each task's device."""
        got = tpl.ids[:, devs]
        if got.min() < 0:
            got = tpl.ids[:, devs] = self.buffers.ids_on_rows(tpl.pattern, devs)
        return got.T

    def sim(self, group) -> GroupSim:
        """The GroupSim of a task group (all of one launch's point tasks)."""
        nodes = group.nodes
        seen = self._last.get(group.gid)
        if seen is None:
            seen = self._last[group.gid] = {}
        # (an entry keeps its nodes alive, so equal ids are the same task objects)
        ids = tuple(map(id, nodes))
        last = seen.get(ids)
        if last is not None:
            return last[1]
        n = len(nodes)
        # Step 1: each task's template (most groups have one).
        tix = self._templates_of(nodes) if RUN_CLASSES else self._templates_by_node(nodes)
        devs = np.fromiter(map(_DEVICE, nodes), dtype=_I8, count=n)
        self._devices(devs)
        one = tix.count(tix[0]) == n
        # What does not depend on the tasks' saved state is a function of their templates
        # and devices: kept per such shape (a stage's launches of one config, an LSTM's
        # steps, share it), the state added per task below.
        shape = (tix[0] if one else tuple(tix), devs.tobytes())
        got = self._shapes.get(shape)
        if got is None:
            if len(self._shapes) >= SHAPES_KEPT:
                self._shapes = {}
            got = self._shapes[shape] = self._shape_arrays(nodes, tix, devs, one)
        dur, counts, buf_ids, read_by_writers, reads_of_writers, host = got
        # Step 4: saved state (keyed by the task's color), after the template's buffers.
        if nodes[0].launch.saved_bytes:
            table = self.buffers
            state = np.fromiter((-1 if (k := state_key(node)) is None
                                 else table.id(k, own_bytes(k)) for node in nodes),
                                dtype=_I8, count=n)
            has = state >= 0
            if one and has.all():                   # (most: n rows of the same buffers)
                size = len(buf_ids) // n
                out = np.empty((n, size + 1), dtype=_I8)
                out[:, :size] = buf_ids.reshape(n, size)
                out[:, size] = state
                counts, buf_ids = counts + 1, out.reshape(-1)
            elif has.any():
                counts = counts + has
                ptr = csr(counts)
                at = ptr[1:][has] - 1               # each state id: its task's last buffer
                mine = np.ones(int(ptr[-1]), dtype=bool)
                mine[at] = False
                out = np.empty(int(ptr[-1]), dtype=_I8)
                out[mine] = buf_ids
                out[at] = state[has]
                buf_ids = out
        sim = GroupSim(dur, np.ones(n, dtype=_I8), self._compute[devs], counts, buf_ids,
                       read_by_writers, reads_of_writers, host)
        if len(seen) >= KEPT_PER_GROUP:
            del seen[next(iter(seen))]
        seen[ids] = (nodes, sim)
        return sim

    def _templates_of(self, nodes: list) -> list[int]:
        """Per task of a group (one launch's tasks) its template's index: the classes
        of the tasks found column by column, a template looked up per class."""
        classes, first = {}, []
        numbers = classes_of_run(nodes[0].launch, nodes, classes, first)
        template = self._template
        # (classes numbered in the order they were put in `classes`)
        of_class = [template(first[c], key) for key, c in classes.items()]
        return [of_class[0]] * len(nodes) if len(of_class) == 1 else \
            list(map(of_class.__getitem__, numbers))

    def _templates_by_node(self, nodes: list) -> list[int]:
        """_templates_of, a class_key per task not seen before (the oracle)."""
        class_of, template = self.class_of, self._template
        tix = []
        for node in nodes:
            t = class_of.get(node)
            if t is None:
                t = class_of[node] = template(node)
            tix.append(t)
        return tix

    def _shape_arrays(self, nodes: list, tix: list, devs: np.ndarray, one: bool) -> tuple:
        """(durations, buffer counts and ids but for saved state, regions read by writers,
        reads of writers, host arrays) of tasks of these templates on these devices."""
        n = len(nodes)
        templates = [tix[0]] if one else sorted(set(tix))
        tix = None if one else np.array(tix, dtype=_I8)
        # Step 2: durations per (template, device spec), from the first such task.
        timing, num_specs = self.timer.timing, len(self._specs)
        if one and num_specs == 1:
            durations, spec = self._templates[templates[0]].durations, self._specs[0]
            d = durations.get(spec)
            if d is None:
                d = durations[spec] = timing(nodes[0])[0]
            dur = np.full(n, d)
        else:
            pair = self._spec[devs] + (0 if one else tix * num_specs)
            pairs, first, inverse = np.unique(pair, return_index=True, return_inverse=True)
            times = np.empty(len(pairs))
            for j, (p, f) in enumerate(zip(pairs.tolist(), first.tolist())):
                t = templates[0] if one else p // num_specs
                durations, spec = self._templates[t].durations, self._specs[p % num_specs]
                d = durations.get(spec)
                if d is None:
                    d = durations[spec] = timing(nodes[f])[0]
                times[j] = d
            dur = times[inverse.reshape(-1)]
        # Step 3: buffers: the template's on the task's device (saved state: sim()).
        sizes = [len(self._templates[t].pattern) for t in templates]
        if one:
            counts = np.full(n, sizes[0], dtype=_I8)
            buf_ids = self._buffer_ids(self._templates[templates[0]], devs).reshape(-1) \
                if sizes[0] else np.zeros(0, dtype=_I8)
        else:
            counts = np.array(sizes, dtype=_I8)[np.searchsorted(templates, tix)]
            ptr = csr(counts)
            buf_ids = np.empty(int(ptr[-1]), dtype=_I8)
            for t, size in zip(templates, sizes):
                if size:
                    idx = np.flatnonzero(tix == t)
                    at = (ptr[idx][:, None] + np.arange(size)).reshape(-1)
                    buf_ids[at] = self._buffer_ids(self._templates[t], devs[idx]).reshape(-1)
        read_by_writers, reads_of_writers = set(), {}
        for t in templates:
            tpl = self._templates[t]
            if tpl.writes is not None:
                read_by_writers.update(tpl.reads)
                for w in tpl.writes:
                    reads_of_writers.setdefault(w, set()).update(tpl.reads)
        host = None
        if self.timer.host_costs:
            # A task's host phases depend on its device only (NodeTimer.host_phases).
            hosts, timer, resources = self._hosts, self.timer, self.resources
            phases = []
            for k, d in enumerate(devs.tolist()):
                h = hosts.get(d)
                if h is None:
                    h = hosts[d] = host_info(timer, resources, nodes[k])
                phases.append(h)
            host = host_arrays(phases)
        key = (frozenset(read_by_writers),
               frozenset([(w, frozenset(r)) for w, r in reads_of_writers.items()]))
        shared = self._reads.get(key)
        if shared is None:
            if len(self._reads) >= SHAPES_KEPT:
                self._reads = {}
            shared = self._reads[key] = (key[0], reads_of_writers)
        return (dur, counts, buf_ids) + shared + (host,)


def host_info(timer, resources, node) -> tuple:
    """A node's host phases (simulator.NodeTimer.host_phases) with resource ids."""
    if not timer.host_costs:
        return NO_HOST
    hd, hr, pd, pr = timer.host_phases(node)
    rid = resources.id
    return hd, tuple(rid(x) for x in hr), pd, tuple(rid(x) for x in pr)
