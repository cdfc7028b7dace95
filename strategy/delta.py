"""SimulationSession: a strategy's launches, plan and simulated timeline, kept up to date
when one operator's configuration changes (delta simulation, the search's inner loop).

A change re-lowers only that operator (parallel_ops.lowering.IncrementalLowering), re-plans
only the regions its launches touch (taskrt.Planner.replace), and re-times the graph reusing
every unchanged node's duration and resources (unchanged nodes are the same objects) and
every untouched region's memory. Times are then propagated in one pass over the nodes in
program order; since each resource serves its nodes in program order (see
simulator.py), the result is exactly what a full simulation of the new graph gives.
"""
from __future__ import annotations

from bisect import bisect_right

from parallel_ops.lowering import IncrementalLowering
from parallel_ops.optim import SGD
from taskrt import Planner
from taskrt.gcpause import gc_paused
from taskrt.liveness import (INSTANCE, PARTIAL, STAGING, buffers_of, is_temporary, peak_bytes,
                             results_of, task_reads_writes)

from .simulator import NodeTimer, SimResult, propagate, result_of

CHECKPOINT_EVERY = 256       # nodes between saved resource states (see _propagate)


class SimulationSession:
    def __init__(self, model, machine_model, costs, strategy=None, optimizer=None):
        self.model, self.machine_model, self.costs = model, machine_model, costs
        self.machine = machine_model.taskrt_machine()
        with gc_paused():                    # see taskrt/gcpause.py
            self.lowering = IncrementalLowering(model, strategy, self.machine,
                                                optimizer or SGD(lr=0.1, momentum=0.9))
            lowered = self.lowering.lowered()
            self.planner = Planner(self.machine, initial=lowered.initial)
            for launch in lowered.launches:
                self.planner.add_launch(launch)
            self.graph = self.planner.finish()
            self.timer = NodeTimer(machine_model, costs)
            # Node -> (duration, resources): nodes a re-plan did not touch are the same
            # objects in the new graph, so only new nodes are timed.
            self._timing: dict = {}
            self._memory_of: dict[str, dict[int, int]] = {}     # region -> device -> bytes
            self._checkpoints: list[tuple[int, dict, dict]] = []  # (node id, free, busy)
            self._undo: tuple | None = None       # what change() replaced, for undo()
            self.result = self._propagate()

    @property
    def configs(self):
        return self.lowering.configs

    def change(self, op_name: str, config) -> SimResult:
        """Give one operator another config and return the new simulation result. `undo()`
        takes it back. On an error (a config that does not fit) the session is as before."""
        lowering = self.lowering
        before = (op_name, lowering.configs[op_name], lowering.parts[op_name], self.graph,
                  self.result, list(self._checkpoints), dict(self._memory_of))
        self._undo = None
        replaced = False
        with gc_paused():
            try:
                part = lowering.change(op_name, config)
                launches = part.forward + part.backward + list(part.updates.values())
                names = set(part.initial_forward) | set(part.initial_update)
                initial = {r: p for r, p in lowering.lowered().initial.items()
                           if r.name in names}
                replaced = True
                touched = self.planner.replace(launches, initial, record_undo=True)
                self.graph = self.planner.finish()
                self.result = self._propagate(touched)
            except BaseException:
                self._restore(before, replaced)
                raise
        self._undo = before
        return self.result

    def undo(self) -> SimResult:
        """Take back the last change(): the graph, result and configs before it (a search's
        rejected proposal costs one re-assembly of the graph instead of a second change)."""
        if self._undo is None:
            raise ValueError("SimulationSession.undo: no change to take back (one level).")
        before, self._undo = self._undo, None
        with gc_paused():
            self._restore(before, True)
        return self.result

    def _restore(self, before, replaced: bool) -> None:
        op_name, cfg, part, graph, result, checkpoints, memory_of = before
        self.lowering.restore(op_name, cfg, part)
        if replaced and self.planner.can_undo:
            self.planner.undo()
            graph = self.planner.finish()
        self.graph, self.result = graph, result
        self._checkpoints, self._memory_of = checkpoints, memory_of

    def full(self) -> SimResult:
        """A from-scratch simulation of the current graph (for checking delta results)."""
        from .simulator import simulate
        return simulate(self.graph, self.machine_model, self.costs,
                        NodeTimer(self.machine_model, self.costs))

    def _region_memory(self, name: str, users=None, tasks=None) -> tuple:
        """One region's part of the memory model (taskrt.liveness): its buffers as
        [(key, bytes)] (instances and partial-sum buffers as the graph records them, see
        Planner.finish, and its reduction copies' staging buffers), their users as node
        objects (key -> list; ids change from graph to graph, objects do not), and the
        regions written by the tasks that read it (None when no task reads or writes it).
        `users` and `tasks` (those with a requirement on it): already collected from the
        graph, else found here from the launches that use the region."""
        planner, graph = self.planner, self.graph
        rp = planner.planners[name]
        if users is None:
            users, tasks = {}, []
            nodes = graph.nodes
            for li, _, _ in planner.log.get(name, ()):
                found = [n for n, _, _ in planner.region_nodes.get((li, name), ())]
                for i in graph.launch_nodes.get(planner.launches[li].name, ()):
                    n = nodes[i]
                    if n.kind == "task" and any(r.region.name == name for r in n.requirements):
                        found.append(n)
                        tasks.append(n)
                for n in found:
                    for key in buffers_of(n, nodes):
                        if key[1] == name:
                            users.setdefault(key, []).append(n)
        sizes = [((kind, name, dev, None), rp.region.nbytes(rect))
                 for kind, rects in ((INSTANCE, rp.instance_rects), (PARTIAL, rp.partial_rects))
                 for dev, rect in rects.items()]
        sizes += [(key, key[3].nbytes) for key in users if key[0] == STAGING]
        rw = set() if tasks else None
        for n in tasks:
            reads, writes = task_reads_writes(n)
            if name in reads:
                rw.update(writes)
        return sizes, users, rw

    def _memory(self, touched, start, end) -> dict[int, int]:
        """memory_per_device(self.graph, start, end), re-collecting only the regions in
        `touched` (all regions, in one pass over the graph, when None)."""
        per_region, graph = self._memory_of, self.graph
        if touched is None:
            by_region = {name: ({}, []) for name in self.planner.planners}
            nodes = graph.nodes
            for n in nodes:
                for key in buffers_of(n, nodes):
                    by_region[key[1]][0].setdefault(key, []).append(n)
                if n.kind == "task":
                    for name in dict.fromkeys(r.region.name for r in n.requirements):
                        by_region[name][1].append(n)
            for name, (users, tasks) in by_region.items():
                per_region[name] = self._region_memory(name, users, tasks)
        else:
            for name in touched:
                per_region[name] = self._region_memory(name)
        # Users' ids in this graph, per region and buffer. A task of an unchanged launch is
        # a new object when its Red+ targets changed: a region whose cached users are not
        # all in this graph (at their ids) is collected again.
        nodes = graph.nodes
        at = nodes.__getitem__
        names = self.planner.planners
        ids_of: dict[str, dict] = {}
        for name in names:
            for attempt in (0, 1):
                users = per_region[name][1]
                ids = {key: [u.id for u in lst] for key, lst in users.items()}
                try:
                    if all(list(map(at, ids[key])) == lst for key, lst in users.items()):
                        break
                except IndexError:
                    pass
                per_region[name] = self._region_memory(name)
            ids_of[name] = ids
        kept = set(graph.initial_valid) | results_of(
            {name: per_region[name][2] for name in names if per_region[name][2] is not None})
        persistent: dict[int, int] = {}
        device, nbytes, user_ids = [], [], []
        for name in names:
            sizes, users, _ = per_region[name]
            if name in kept:
                for key, b in sizes:
                    persistent[key[2]] = persistent.get(key[2], 0) + b
                continue
            ids = ids_of[name]
            for key, b in sizes:
                lst = ids.get(key)
                if not is_temporary(name, b, kept):     # a small buffer
                    persistent[key[2]] = persistent.get(key[2], 0) + b
                elif lst:
                    device.append(key[2])
                    nbytes.append(b)
                    user_ids.append(lst)
        return peak_bytes(device, nbytes, user_ids, start, end, persistent)

    def _propagate(self, touched=None) -> SimResult:
        """Time the graph. The first `planner.unchanged_nodes` nodes are those of the last
        graph, so their times stand: propagation resumes at the last checkpoint (resource
        state before a node, taken every CHECKPOINT_EVERY nodes) at or before the first node
        that may differ."""
        graph, timer, timing = self.graph, self.timer, self._timing
        nodes = graph.nodes
        n = len(nodes)
        if len(timing) > 2 * n + 1024:          # forget the nodes of older graphs
            timing = self._timing = {node: timing[node] for node in nodes if node in timing}
        checkpoints = self._checkpoints
        old = self.result if touched is not None else None
        k = bisect_right(checkpoints, self.planner.unchanged_nodes, key=lambda c: c[0]) \
            if old is not None else 0
        del checkpoints[k:]
        if k:
            pos, free, busy = checkpoints[-1]
            free, busy = dict(free), dict(busy)
            start = old.start[:pos] + [0.0] * (n - pos)
            end = old.end[:pos] + [0.0] * (n - pos)
        else:
            pos, free, busy = 0, {}, {}
            start, end = [0.0] * n, [0.0] * n
        next_checkpoint = pos if not k else pos + CHECKPOINT_EVERY
        get = timing.get
        timer_timing = timer.timing

        def node_timing(node):
            cached = get(node)
            if cached is None:
                cached = timing[node] = timer_timing(node)
            return cached
        propagate(nodes[pos:] if pos else nodes, graph.preds, node_timing, start, end, free,
                  busy, checkpoints, CHECKPOINT_EVERY, next_checkpoint)
        return result_of(self.machine_model, start, end, busy,
                         self._memory(touched, start, end))
