"""SimulationSession: a strategy's launches, plan and simulated timeline, kept up to date
when one operator's configuration changes (delta simulation, the search's inner loop).

A change re-lowers only that operator (parallel_ops.lowering.IncrementalLowering), re-plans
only the regions its launches touch (taskrt.Planner.replace), and re-times the graph reusing
every unchanged node's duration and resources. Times are then propagated in one pass over
the nodes in program order; since each resource serves its nodes in program order (see
simulator.py), the result is exactly what a full simulation of the new graph gives.
"""
from __future__ import annotations

from parallel_ops.lowering import IncrementalLowering
from parallel_ops.optim import SGD
from taskrt import Planner
from taskrt.gcpause import gc_paused

from .simulator import NodeTimer, SimResult, memory_per_device, resource_name


def node_key(node):
    """Identity of a node across re-plans: (launch, color) for tasks; copies and reductions
    of regions that were not re-planned are the very same objects."""
    return (node.launch.name, node.color) if node.kind == "task" else node


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
            self._timing: dict = {}          # node key -> (node, duration, resources)
            self.result = self._propagate()

    @property
    def configs(self):
        return self.lowering.configs

    def change(self, op_name: str, config) -> SimResult:
        """Give one operator another config and return the new simulation result."""
        with gc_paused():
            part = self.lowering.change(op_name, config)
            launches = part.forward + part.backward + list(part.updates.values())
            names = set(part.initial_forward) | set(part.initial_update)
            initial = {r: p for r, p in self.lowering.lowered().initial.items()
                       if r.name in names}
            self.planner.replace(launches, initial)
            self.graph = self.planner.finish()
            self.result = self._propagate()
        return self.result

    def full(self) -> SimResult:
        """A from-scratch simulation of the current graph (for checking delta results)."""
        from .simulator import simulate
        return simulate(self.graph, self.machine_model, self.costs,
                        NodeTimer(self.machine_model, self.costs))

    def _propagate(self) -> SimResult:
        graph, timer, old = self.graph, self.timer, self._timing
        n = len(graph.nodes)
        start, end = [0.0] * n, [0.0] * n
        free: dict = {}
        busy: dict = {}
        timing: dict = {}
        preds = graph.preds
        for node in graph.nodes:
            key = node_key(node)
            cached = old.get(key)
            if cached is not None and (cached[0] is node or _same_task(cached[0], node)):
                _, dur, resources = cached
            else:
                dur, resources = timer.timing(node)
            timing[key] = (node, dur, resources)
            i = node.id
            t = 0.0
            for p in preds[i]:
                if end[p] > t:
                    t = end[p]
            for r in resources:
                f = free.get(r, 0.0)
                if f > t:
                    t = f
            e = t + dur
            for r in resources:
                free[r] = e
                busy[r] = busy.get(r, 0.0) + dur
            start[i], end[i] = t, e
        self._timing = timing
        memory = memory_per_device(graph)
        over = {d: b - self.machine_model.device(d).memory_capacity for d, b in memory.items()
                if b > self.machine_model.device(d).memory_capacity}
        makespan = max(end, default=0.0) if not over else float("inf")
        return SimResult(makespan, start, end, {resource_name(r): v for r, v in busy.items()},
                         memory, over)


def _same_task(a, b) -> bool:
    """Two task nodes that time alike: same device, cost key and Red+ targets (whether a
    contribution is assigned or added changes the work)."""
    return a.kind == "task" and b.kind == "task" and a.device == b.device and \
        a.targets == b.targets and a.cost_key == b.cost_key
