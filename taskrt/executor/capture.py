"""CUDA-graph capture of a LocalExecutor's plan: segments, warm-up, capture, replay.

What it owns: splitting the executor's compiled plan into *segments*, runs of entries on one
device that may be captured, and *eager* runs, entries run by Python every iteration: a
task whose function reads host state that changes from iteration to iteration (its
`capture_hazard(args, color)` names why: dropout's per-step mask, the optimizer's step
count), the task that takes saved state from such a task or gives state to it (the state
lives in Python, not in a buffer), a node spanning two physical devices, a device the
backend does not capture. Iteration 1 runs eagerly (the warm-up: lazy initialization, the
kernels' workspaces), iteration 2 captures each segment once (and runs it), later
iterations replay the segments and run the eager entries, in plan order.

What it does not own: the plan (taskrt.executor.local) and static storage (InstanceStore.
make_static), which capture needs: a graph reads and writes the addresses it saw, so every
buffer keeps its storage for good (no temporaries, no adoption; a new storage is an error).

Backends: CudaGraphs (torch.cuda.CUDAGraph, one private memory pool and a side stream per
device, copies on a second stream) and CheckedReplay (taskrt/executor/capture_check.py),
which captures on any device with CUDA graphs' semantics and checks what they rely on: the
tests run the executor with it on the CPU (TASKRT_CUDA_GRAPHS=2).
"""
from __future__ import annotations

from typing import Callable

import torch

from ..errors import ExecutionError, PlanError
from ..taskgraph import COPY, REDUCE, TASK
from .capture_check import OFF_HINT, CheckedReplay


def backend_for(mode: int, torch_devices) -> "CudaGraphs | CheckedReplay | None":
    """The capture backend Settings.cuda_graphs asks for, None when capture does nothing
    here (off, or 1 without a CUDA device)."""
    if mode not in (0, 1, 2):
        raise PlanError(f"TASKRT_CUDA_GRAPHS={mode}: use 0 (off), 1 (capture CUDA devices) "
                        "or 2 (capture any device with the checking replay, for tests).")
    if mode == 2:
        return CheckedReplay()
    if mode == 1 and torch.cuda.is_available() and any(
            torch.device(t).type == "cuda" for t in torch_devices):
        return CudaGraphs()
    return None


def _device(t: str) -> torch.device:
    d = torch.device(t)
    if d.type == "cuda" and d.index is None:
        d = torch.device("cuda", torch.cuda.current_device())
    return d


def _node_devices(node) -> tuple:
    if node.kind is TASK or node.kind is REDUCE:
        return (node.device,)
    if node.kind is COPY:
        return (node.src, node.dst)
    return tuple(node.devices)


def _hazard(node) -> str | None:
    check = getattr(node.launch.task, "capture_hazard", None) if node.kind is TASK else None
    return check(node.launch.args, node.color) if check is not None else None


class Segment:
    """Entries plan[start:stop]; `device` is the device captured, None when run eagerly
    (`reason` says why, for errors and docs)."""
    __slots__ = ("start", "stop", "device", "reason", "graph")

    def __init__(self, start, stop, device, reason=None):
        self.start, self.stop, self.device, self.reason = start, stop, device, reason
        self.graph = None

    def __repr__(self) -> str:
        where = f"eager ({self.reason})" if self.device is None else f"graph on {self.device}"
        return f"Segment[{self.start}:{self.stop} {where}]"


def split(graph, entries, torch_device: dict, backend) -> list[Segment]:
    """Cut the plan's entries (node ids per entry) into segments (see the module doc)."""
    nodes = graph.nodes
    # Step 1: the hazardous tasks, then everything state-paired with them (to a fixpoint:
    # chains of state_from).
    reasons: dict[tuple, str] = {}
    for n in nodes:
        if n.kind is TASK:
            r = _hazard(n)
            if r is not None:
                reasons[n.launch.name, n.color] = f"{n.launch.name}: {r}"
    pairs = [((n.launch.name, n.color), (n.launch.state_from, n.color)) for n in nodes
             if n.kind is TASK and n.launch.state_from is not None]
    changed = bool(reasons)
    while changed:
        changed = False
        for a, b in pairs:
            for x, y in ((a, b), (b, a)):
                if x in reasons and y not in reasons:
                    reasons[y] = f"{y[0]}: takes saved state from or gives it to " \
                                 f"{reasons[x]}"
                    changed = True
    # Step 2: each entry's device (None: eager, with its reason), then runs of equal ones.
    keys = []
    for ids in entries:
        key, why = None, None
        devs = {_device(torch_device[d]) for i in ids for d in _node_devices(nodes[i])}
        hazards = [reasons[k] for i in ids if nodes[i].kind is TASK
                   and (k := (nodes[i].launch.name, nodes[i].color)) in reasons]
        if hazards:
            why = hazards[0]
        elif len(devs) != 1:
            why = f"spans devices {sorted(map(str, devs))}"
        elif not backend.capturable(next(iter(devs))):
            why = f"{next(iter(devs))} is not captured by the {backend.name} backend"
        else:
            key = next(iter(devs))
        keys.append((key, why))
    out: list[Segment] = []
    for k, (key, why) in enumerate(keys):
        if out and out[-1].device == key and (key is not None or out[-1].reason == why):
            out[-1].stop = k + 1
        else:
            out.append(Segment(k, k + 1, key, why))
    return out


class Capture:
    """What LocalExecutor.run() calls when capture is on: warm-up, capture, replay."""

    def __init__(self, executor, backend):
        self.executor, self.backend = executor, backend
        if isinstance(backend, CheckedReplay) and backend.store is None:
            backend.store = executor.store
        self.plan = executor.plan
        self.steps = [step for step, _, _ in self.plan]
        self.segments = split(executor.graph, executor.entries, executor.store.torch_device,
                              backend)
        # copy entries a backend may run on a side stream: entry -> (node ids, pred ids)
        nodes, preds = executor.graph.nodes, executor.graph.preds
        self.copies = {k: ids for k, ids in enumerate(executor.entries)
                       if len(ids) == 1 and nodes[ids[0]].kind is COPY}
        self.preds = [tuple(p for i in ids for p in preds[i]) for ids in executor.entries]
        self.entries = executor.entries
        self.iteration = 0
        self.at = 0                     # the entry being captured

    def captured(self) -> int:
        """How many segments are captured (0 before the second iteration)."""
        return sum(s.graph is not None for s in self.segments)

    def _eager(self, seg: Segment) -> None:
        for step in self.steps[seg.start:seg.stop]:
            step()

    def _describe(self, seg: Segment) -> str:
        nodes = self.executor.graph.nodes
        at = nodes[self.entries[self.at][0]].describe()
        return f"entries {seg.start}..{seg.stop - 1} on {seg.device}, at entry {self.at} ({at})"

    def run(self) -> None:
        if self.executor.plan is not self.plan:
            raise ExecutionError(
                "LocalExecutor.run: the plan was replaced after CUDA-graph capture was set "
                "up; the captured graphs run the old plan's steps. Build a new executor "
                f"for the new plan, or {OFF_HINT}.")
        it, self.iteration = self.iteration, self.iteration + 1
        if it == 0:                                  # warm-up: eagerly, every entry
            self.backend.warmup(lambda: [self._eager(s) for s in self.segments])
            return
        if it == 1:
            for seg in self.segments:
                if seg.device is None:
                    self._eager(seg)
                    continue
                try:
                    seg.graph = self.backend.capture(seg.device, self._segment_fn(seg))
                except ExecutionError as e:
                    how = "" if OFF_HINT in str(e) else (
                        " Make that step capture-safe (or give its task function a "
                        f"capture_hazard), or {OFF_HINT}.")
                    raise ExecutionError(f"CUDA-graph capture of {self._describe(seg)}: "
                                         f"{e}{how}") from e
                except Exception as e:
                    raise ExecutionError(f"CUDA-graph capture of {self._describe(seg)} "
                                         f"failed: {type(e).__name__}: {e}. A step in it may "
                                         "sync with the host (.item(), a data-dependent "
                                         "shape) or use a CPU tensor; give its task function "
                                         f"a capture_hazard, or {OFF_HINT}.") from e
            return
        replay = self.backend.replay
        for seg in self.segments:
            if seg.graph is None:
                self._eager(seg)
            else:
                replay(seg.graph)

    def _segment_fn(self, seg: Segment) -> Callable[[], None]:
        """The segment's entries in order; copies handed to the backend's copy stream
        (ordered by the graph's edges: a later entry waits for the copies it follows)."""
        copy_stream = getattr(self.backend, "copy_stream", None)
        entries = range(seg.start, seg.stop)
        copies, preds, steps = self.copies, self.preds, self.steps
        if copy_stream is None:
            def run_all() -> None:
                for k in entries:
                    self.at = k                     # for errors: where capture failed
                    steps[k]()
            return run_all

        def run() -> None:
            pending = copy_stream(seg.device)
            for k in entries:
                self.at = k
                pending.wait_for(preds[k])
                if k in copies:
                    pending.run(copies[k][0], steps[k])
                else:
                    steps[k]()
            pending.join()
        return run


# -- backends ------------------------------------------------------------------------------
class CudaGraphs:
    """torch.cuda.CUDAGraph per segment: one private memory pool and one side stream per
    device (the warm-up runs there too, as PyTorch asks), copies on a second stream."""
    name = "cuda"

    def __init__(self):
        self.pools: dict = {}
        self.streams: dict = {}
        self.replays = 0

    @staticmethod
    def capturable(device: torch.device) -> bool:
        return device.type == "cuda"

    def _stream(self, device) -> "torch.cuda.Stream":
        s = self.streams.get(device)
        if s is None:
            s = self.streams[device] = torch.cuda.Stream(device)
        return s

    def warmup(self, run: Callable[[], None]) -> None:
        main = torch.cuda.current_stream()
        side = self._stream(_device("cuda"))
        side.wait_stream(main)
        with torch.cuda.stream(side):
            run()
        main.wait_stream(side)

    def capture(self, device, fn: Callable[[], None]):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.device(device):
            pool = self.pools.get(device)
            if pool is None:
                pool = self.pools[device] = torch.cuda.graph_pool_handle()
            # torch.cuda.graph synchronizes first, so eager work before it is done.
            with torch.cuda.graph(g, pool=pool, stream=self._stream(device)):
                fn()
            g.replay()                # capture recorded the work; this iteration runs it
        return device, g

    def replay(self, handle) -> None:
        device, g = handle
        self.replays += 1
        if device.index == torch.cuda.current_device():
            g.replay()
        else:
            with torch.cuda.device(device):
                g.replay()

    def copy_stream(self, device) -> "_CopyStream":
        side = self.streams.get((device, "copies"))
        if side is None:
            side = self.streams[device, "copies"] = torch.cuda.Stream(device)
        return _CopyStream(torch.cuda.current_stream(device), side)


class _CopyStream:
    """Copies of one capture on a second stream: each starts after everything issued before
    it on the capture stream (so it overwrites nothing still being read) and is waited for
    by the first later entry that has it as a predecessor in the graph, and at the end."""

    def __init__(self, main, side):
        self.main, self.side = main, side       # the capture stream, the copies' stream
        self.done: dict[int, "torch.cuda.Event"] = {}

    def run(self, node_id: int, step) -> None:
        self.side.wait_stream(self.main)
        with torch.cuda.stream(self.side):
            step()
            ev = torch.cuda.Event()
            ev.record(self.side)
        self.done[node_id] = ev

    def wait_for(self, preds) -> None:
        if self.done:
            for p in preds:
                ev = self.done.pop(p, None)
                if ev is not None:
                    self.main.wait_event(ev)

    def join(self) -> None:
        if self.done:
            self.main.wait_stream(self.side)   # a capture must end with its streams joined
            self.done.clear()
