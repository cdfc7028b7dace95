"""Running one task node in isolation, exactly as the executors run it.

`node_steps` builds the executor's own step (`taskrt.executor.steps.task_step`) over a
`PartStore`: fresh tensors of the node's part shapes on one torch device, instead of the
graph's instances. So a measured or counted task does what it does in a real iteration:
the task function on its views, then the stores of what it returns (WD/RW copies into the
instance, Red+ contributions added to their pieces).

Data: floats are uniform in [0.5, 1.5) (positive, so logs, square roots and divisions
stay finite); integer inputs (labels, token ids) are uniform below a bound taken from
`int_ranges` (region name -> exclusive bound; apps declare these), else from the operator's
parameters (num_embeddings, classes, ...), else zeros, which every index op accepts.

A backward node (launch.state_from) needs what its forward saved: its paired forward step
runs first. The pair is the graph's forward node of the same color when the graph is known,
else a forward context rebuilt from the backward's StageArgs (parallel_ops launches).
"""
from __future__ import annotations

import torch

from parallel_ops.tasks import StageArgs, forward_task, part_views
from taskrt.executor.instances import TORCH_DTYPES
from taskrt.executor.steps import TaskContext, task_step
from taskrt.taskgraph import TASK

# Operator parameters that bound an integer input: the first one present is used.
INDEX_PARAMS = ("num_embeddings", "classes", "num_classes", "vocab_size", "vocab")


class SteadyStep:
    """Run an optimizer update at a steady-state step count, and restore it."""

    def __init__(self, node):
        self.opt = node.launch.args if hasattr(node.launch.args, "step_count") else None

    def __enter__(self):
        if self.opt is not None:
            self.saved = self.opt.step_count
            self.opt.step_count = max(2, self.saved)

    def __exit__(self, *exc):
        if self.opt is not None:
            self.opt.step_count = self.saved
        return False


class _AnyDevice(dict):
    """torch_device for every logical device id: the one local device."""

    def __init__(self, device: str):
        super().__init__()
        self.device = device

    def __getitem__(self, _):
        return self.device


def int_bound(node, region_name: str, int_ranges) -> int:
    if int_ranges and region_name in int_ranges:
        return max(1, int(int_ranges[region_name]))
    stage = getattr(node.launch.args, "stage", None)
    params = getattr(stage, "params", None) or {}
    for p in INDEX_PARAMS:
        v = params.get(p)
        if isinstance(v, int) and v > 0:
            return v
    return 1


def make_tensor(shape, dtype: str, device: str, bound: int = 1,
                values: bool = True) -> torch.Tensor:
    """Part data of one region (see the module doc). `values=False`, for counting work,
    which needs shapes, not values: floats uninitialized, integers zeros."""
    dt = TORCH_DTYPES[dtype]
    if device == "meta":
        return torch.empty(shape, dtype=dt, device="meta")
    if not values:      # floats uninitialized (no time to fill), indices zeros (valid)
        if dt.is_floating_point:
            return torch.empty(shape, dtype=dt, device=device)
        return torch.zeros(shape, dtype=dt, device=device)
    if dt.is_floating_point:
        return torch.rand(shape, dtype=dt, device=device).add_(0.5)
    if dt == torch.bool or bound <= 1:
        return torch.zeros(shape, dtype=dt, device=device)
    return torch.randint(0, bound, shape, dtype=dt, device=device)


class PartStore:
    """The InstanceStore interface over fresh tensors of one node's part shapes."""

    def __init__(self, node, device: str, int_ranges=None, values: bool = True):
        self.torch_device = _AnyDevice(device)
        self.values = values
        self.device = device
        self.node = node
        self.int_ranges = int_ranges
        self.regions = {r.region.name: r.region for r in node.requirements}
        self.tensors: dict = {}

    def _get(self, which: str, name: str, rect) -> torch.Tensor:
        t = self.tensors.get((which, name, rect))
        if t is None:
            region = self.regions[name]
            if self.device == "meta":         # shapes only: no values, no index bound
                t = torch.empty(rect.shape, dtype=TORCH_DTYPES[region.dtype], device="meta")
            else:
                t = make_tensor(rect.shape, region.dtype, self.device,
                                int_bound(self.node, name, self.int_ranges), self.values)
            self.tensors[which, name, rect] = t
        return t

    def instance(self, name: str, device: int, rect) -> torch.Tensor:
        return self._get("instance", name, rect)

    def partial(self, name: str, device: int, rect) -> torch.Tensor:
        return self._get("partial", name, rect)


def forward_pair(graph, node):
    """The forward node whose saved state `node` (a backward node) takes, from the graph."""
    src = node.launch.state_from
    for i in graph.launch_nodes.get(src, ()):
        n = graph.nodes[i]
        if n.kind is TASK and n.color == node.color:
            return n
    return None


class _Launch:
    """The attributes of an IndexLaunch that a TaskContext reads."""

    def __init__(self, name, args):
        self.name, self.args = name, args


def _rebuilt_forward(node, device: str, int_ranges, values: bool):
    """A forward context for a parallel_ops backward node without its graph: forward_task
    on input and weight parts of the backward's spec. Returns (context, step)."""
    a = node.launch.args
    if not isinstance(a, StageArgs):
        return None
    stage, spec = a.stage, a.specs[node.color]
    layout, views = part_views(stage, spec, lambda r, t: make_tensor(
        r.shape, t.dtype, device, int_bound(node, t.name, int_ranges), values))
    args = StageArgs(stage, a.specs, {node.color: tuple(layout)}, True, a.input_grads,
                     a.weight_grads, a.training)
    ctx = TaskContext(_Launch(node.launch.state_from, args), node.color, node.device, device)

    def run() -> None:
        forward_task(ctx, *views)
    return ctx, run


def node_steps(node, device: str, graph=None, int_ranges=None, values: bool = True):
    """(forward step or None, step) running `node` on torch `device` in isolation. For a
    backward node the forward step must run before every run of the step. `values=False`:
    parts are zeros (see make_tensor)."""
    contexts: dict = {}
    fwd = None
    if node.launch.state_from is not None:
        pair = forward_pair(graph, node) if graph is not None else None
        if pair is not None:
            fwd = task_step(pair, PartStore(pair, device, int_ranges, values), contexts)
        else:
            rebuilt = _rebuilt_forward(node, device, int_ranges, values)
            if rebuilt is not None:
                ctx, fwd = rebuilt
                contexts[node.launch.state_from, node.color] = ctx
    step = task_step(node, PartStore(node, device, int_ranges, values), contexts)
    return fwd, step
