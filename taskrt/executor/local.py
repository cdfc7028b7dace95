"""LocalExecutor: runs a whole TaskGraph in one process over several logical devices.

Nodes run one at a time in id order (a topological order). The graph is compiled once into
steps with pre-sliced views (Legion-style tracing), so `run()` replays it without planning;
consecutive independent points of launches with one `batch` function and args (the
optimizer's updates) run as one batch per device (taskrt.launch); a point with no region
requirements whose task function's `idle(args, color)` says it does nothing (parallel_ops'
empty parts) is left out of the plan; a traced run() times every node alone (with
record_trace every run() is traced until `tracing` is set False: apps/training.py traces
only the last iteration);
temporaries (taskrt.liveness) are allocated before their first user and released after their
last, and `keep` names the regions to read after run() ("all": nothing is freed).
`write`/`read` move whole tensors in and out of the graph's regions.

With CUDA-graph capture on (Settings.cuda_graphs, TASKRT_CUDA_GRAPHS; taskrt.executor.
capture) and a device to capture, every buffer is static (no temporaries, no adoption),
the first run() is a warm-up, the second captures each device's segments of the plan and
later ones replay them.
"""
from __future__ import annotations

import time

import torch

from ..errors import PlanError
from ..trace import LoadMeter, Stamps, TraceEvent, traced_run
from ..region import Region
from ..taskgraph import COPY, REDUCE, TASK
from .capture import Capture, backend_for
from .instances import LIGHT_ALLOCATE, InstanceStore
from .steps import (batches_step, local_allreduce_step, local_copy_step, plan_entries,
                    reduce_step, task_step)


class LocalExecutor:
    def __init__(self, graph, record_trace: bool = False, keep="all", settings=None):
        self.graph = graph
        self.store = InstanceStore(graph, range(len(graph.machine.devices)), keep, settings)
        self.settings = self.store.settings
        backend = None if record_trace else backend_for(self.settings.cuda_graphs,
                                                         self.store.torch_device.values())
        if backend is not None:
            self.store.make_static()        # captured graphs need fixed addresses
        self.contexts: dict = {}
        self.steps = []
        for node in graph.nodes:
            if node.kind is TASK:
                self.steps.append(task_step(node, self.store, self.contexts))
            elif node.kind is COPY:
                self.steps.append(local_copy_step(node, self.store))
            elif node.kind is REDUCE:
                self.steps.append(reduce_step(node, self.store))
            else:
                self.steps.append(local_allreduce_step(node, self.store))
        self.record_trace = record_trace
        self.tracing = record_trace   # whether the next run() is traced (needs record_trace)
        # What run() calls: per entry, the ids of its nodes (one node, or consecutive
        # batchable nodes run as one batch; a traced run() times every node alone).
        self.entries = self._entries(False)
        # Nodes run in id order, so each temporary's first and last user are known: per
        # entry (step, temporaries to allocate before it, temporaries to release after it).
        first: dict[int, list] = {}
        last: dict[int, list] = {}
        for buf, users in zip(self.store.temporaries, self.store.liveness.users):
            first.setdefault(users[0], []).append(buf)
            last.setdefault(users[-1], []).append(buf)
        # Small buffers of regions nobody reads after run() are released too, cheaply
        # (InstanceStore.make_light): memory a gradient or an activation held goes back to
        # malloc after its last use, still in cache for the next tensor, as in eager PyTorch.
        for buf, i, j in (() if self.store.static else self.store.make_light()):
            if buf.light == LIGHT_ALLOCATE:    # LIGHT_LAZY: nothing to do before its writer
                first.setdefault(i, []).append(buf)
            last.setdefault(j, []).append(buf)
        def plan(entries):
            return [(self.steps[ids[0]] if len(ids) == 1 else
                     batches_step([graph.nodes[i] for i in ids], self.store, self.contexts),
                     tuple(b for i in ids for b in first.get(i, ())),
                     tuple(b for i in ids for b in last.get(i, ()))) for ids in entries]
        self.traced_entries = self._entries(True) if record_trace else None
        self.plan = plan(self.entries)
        self._traced_plan = plan(self.traced_entries) if record_trace else None
        self._replay, self._replay_of = None, None      # see _replayed()
        self.capture = None if backend is None else Capture(self, backend)
        self._stamps = Stamps()               # the last traced iteration's (self.trace)
        self.trace_load: dict | None = None      # LoadMeter.stop() of the traced iteration

    def _entries(self, traced: bool) -> list[list[int]]:
        """Node ids per entry (steps.plan_entries over the whole graph, in id order)."""
        return plan_entries(self.graph.nodes, self.graph.preds, range(len(self.graph.nodes)),
                            traced)

    # -- data in and out -----------------------------------------------------------------
    def _region(self, region) -> Region:
        name = region if isinstance(region, str) else region.name
        if name not in self.graph.regions:
            raise PlanError(f"Region '{name}' is not used by this graph; known regions: "
                            f"{sorted(self.graph.regions)[:10]}.")
        return self.graph.regions[name]

    def write(self, region, value: torch.Tensor) -> None:
        """Store a full tensor into every initial holder of the region's pieces."""
        reg = self._region(region)
        if tuple(value.shape) != reg.shape:
            raise PlanError(f"write '{reg.name}': tensor of shape {tuple(value.shape)} for a "
                            f"region of shape {reg.shape}.")
        pieces = self.graph.initial_valid.get(reg.name)
        if not pieces:
            raise PlanError(f"write '{reg.name}': the plan has no initial data for it. Pass "
                            "it in plan(..., initial=...).")
        for rect, devices in pieces:
            part = value if rect == reg.rect else value[rect.slices_within(reg.rect)]
            for d in devices:
                self.store.instance(reg.name, d, rect).copy_(part)

    def read(self, region) -> torch.Tensor:
        """The region's value after the graph ran: valid pieces plus unreduced partial sums."""
        reg = self._region(region)
        self.store.check_readable(reg.name)
        valid = self.graph.final_valid.get(reg.name, [])
        if len(valid) == 1 and valid[0][0] == reg.rect and reg.name not in \
                self.graph.final_pending:                  # one piece holds all of it
            rect, devices = valid[0]
            return self.store.instance(reg.name, devices[0], rect).to("cpu", copy=True)
        out = None
        for rect, devices in self.graph.final_valid.get(reg.name, []):
            part = self.store.instance(reg.name, devices[0], rect)
            out = out if out is not None else torch.zeros(reg.shape, dtype=part.dtype)
            out[rect.slices_within(reg.rect)] = part.cpu()
        for rect, device, partial in self.graph.final_pending.get(reg.name, []):
            part = (self.store.partial if partial else self.store.instance)(reg.name, device, rect)
            out = out if out is not None else torch.zeros(reg.shape, dtype=part.dtype)
            out[rect.slices_within(reg.rect)] += part.cpu()
        if out is None:
            raise PlanError(f"read '{reg.name}': no part of it holds data after the graph.")
        return out

    # -- running ---------------------------------------------------------------------------
    def _replayed(self) -> list:
        """What run() replays: per entry of `plan` (step, temporaries to allocate, the
        light buffers' drop methods, the other temporaries to release): InstanceStore.
        release's test of each buffer's kind taken once (again if `plan` was replaced)."""
        if self._replay_of is not self.plan:
            self._replay = [(step, allocate, tuple(b.drop for b in free if b.light),
                             tuple(b for b in free if not b.light))
                            for step, allocate, free in self.plan]
            self._replay_of = self.plan
        return self._replay

    def run(self) -> None:
        """Execute every node once, in id order."""
        store = self.store
        store.start_iteration()
        begin, release = store.begin, store.release
        if self.capture is not None:
            self.capture.run()
            return
        if not traced_run(self):
            for step, allocate, drops, free in self._replayed():
                if allocate:
                    begin(allocate)
                step()
                for drop in drops:
                    drop()
                if free:
                    release(free)
            return
        meter = LoadMeter().start()                  # the OS's load, traced
        clock = time.perf_counter
        t0 = clock()
        stamps = self._stamps = Stamps(self.graph.nodes, t0)
        stamp = stamps.raw.append
        for i, (step, allocate, free) in enumerate(self._traced_plan):
            start = clock()
            begin(allocate)
            step()
            release(free)
            stamp((i, start, clock()))
        self.trace_load = meter.stop()

    @property
    def trace(self) -> list[TraceEvent]:
        """The last traced iteration's events (one per node, in id order; empty without
        record_trace)."""
        return self._stamps.events()
