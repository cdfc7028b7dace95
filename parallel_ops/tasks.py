"""The task functions every lowered launch runs: forward with autograd, backward, update.

Ops with their own backward (Op.explicit_backward) run forward without autograd where
their forward_saving() accepts the part, and backward calls theirs (`_Explicit` state).

Instance views are handed to autograd through `.data` aliases: they share storage but not
the version counter, so later copies into other parts of the same instance do not trip
autograd's saved-tensor checks (activations are written once per iteration, so what a
forward part saved is unchanged when its backward runs).
"""
from __future__ import annotations

import functools
import operator
from dataclasses import dataclass, field
from typing import Any

import torch

IN, W, OUT, DOUT, DIN, DW, STATE = "in", "w", "out", "dout", "din", "dw", "state"

# torch.autograd.grad validates and normalizes its arguments in Python on every call (tens of
# microseconds); the lowering already guarantees matching shapes and dtypes, so call the
# engine directly when this torch has it.
_ENGINE = getattr(torch.autograd.Variable, "_execution_engine", None)
# Switching grad mode directly: `with torch.enable_grad()` costs microseconds per task.
_grad_enabled, _set_grad_enabled = torch.is_grad_enabled, torch._C._set_grad_enabled


def _grads(ys, xs, dys):
    """Gradients of ys w.r.t. xs for output gradients dys (None where xs is unused)."""
    if len(ys) == 1:
        grads = _chain_grads(ys[0], dys[0], xs)
        if grads is not None:
            return grads
    was_enabled = _grad_enabled()
    _set_grad_enabled(True)
    try:
        if _ENGINE is not None:
            return _ENGINE.run_backward(tuple(ys), tuple(dys), False, False, tuple(xs), True,
                                        False)
        return torch.autograd.grad(ys, xs, dys, allow_unused=True)
    finally:
        _set_grad_enabled(was_enabled)


_ACCUMULATE = type((torch.zeros(1, requires_grad=True) * 1).grad_fn.next_functions[0][0])
_PYTHON_NODE = torch.autograd.function.BackwardCFunction


def _chain(y):
    """y's autograd nodes from y back to the leaves, when they form a chain: each node is a
    built-in one with one output and at most one input that is not a leaf (a convolution
    part with its fused activation, a ReLU, a linear layer). None for any other graph."""
    if y.output_nr != 0:
        return None
    nodes, node = [], y.grad_fn
    while node is not None:
        if isinstance(node, _PYTHON_NODE) or len(getattr(node, "_input_metadata", ())) != 1:
            return None
        nodes.append(node)
        following = None
        for nxt, _ in node.next_functions:
            if nxt is not None and type(nxt) is not _ACCUMULATE:
                if following is not None:
                    return None
                following = nxt
        node = following
    return nodes


def _fitted(g, nxt, nr):
    """g as the engine hands it to input `nr` of node `nxt`: summed down to the shape that
    input was recorded with where the forward broadcast it (x * x.sum(-1, keepdim=True)),
    and in its dtype. The engine does this between any two nodes (validate_outputs); a
    direct node call does not, so skipping it gives silently wrong gradients."""
    meta = nxt._input_metadata[nr]
    shape = meta.shape
    if len(shape) != g.dim() or any(a != b for a, b in zip(shape, g.shape)):
        g = g.sum_to_size(shape)
    if g.dtype != meta.dtype:
        g = g.to(meta.dtype)
    return g


def _chain_grads(y, dy, xs):
    """Gradients of y w.r.t. xs by calling y's autograd nodes one after the other when they
    form a chain (`_chain`): the engine's set-up costs ~25 us per call, as much as a small
    kernel. Without grad mode, as the engine runs them; between nodes each gradient is
    fitted to the shape and dtype its next node recorded (`_fitted`, a broadcast summed
    back), and a leaf reached twice (x * x) gets the sum, as the engine does.
    None when the graph is not a chain, or on a GPU (the engine then runs: direct calls are
    not checked on GPU streams yet). Tensor hooks registered inside a forward do not run
    (docs/custom_ops.md)."""
    if y.grad_fn is None or y.device.type != "cpu":
        return None
    nodes = _chain(y)
    if not nodes:
        return None
    found: dict[int, torch.Tensor] = {}
    was_enabled = _grad_enabled()
    _set_grad_enabled(False)
    try:
        for node in nodes:
            out = node(dy)
            if not isinstance(out, tuple):
                out = (out,)
            dy = None
            for (nxt, nr), g in zip(node.next_functions, out):
                if g is None or nxt is None:
                    continue
                g = _fitted(g, nxt, nr)
                if type(nxt) is _ACCUMULATE:
                    key = id(nxt.variable)
                    found[key] = g if key not in found else found[key] + g
                else:
                    dy = g
            if dy is None:
                break
    finally:
        _set_grad_enabled(was_enabled)
    return [None if x is None else found.get(id(x)) for x in xs]


@dataclass
class StageArgs:
    """Static arguments of one launch: the stage, and per color its spec and layout."""
    stage: Any
    specs: dict          # color -> PartSpec
    layouts: dict        # color -> tuple of (group, index), one per requirement
    grad: bool           # keep an autograd graph for a backward launch
    input_grads: tuple   # per input: whether its gradient is wanted
    weight_grads: tuple  # per weight: whether it is trainable
    training: bool = True  # the mode this launch was lowered for (a trainer and an
    #                        evaluator of one model may coexist)
    plans: dict = field(default_factory=dict, compare=False, repr=False)  # color -> _Plan

    def plan(self, color) -> "_Plan":
        """Where each input, weight and output gradient is among a part's views (computed
        once per color: tasks run every iteration)."""
        p = self.plans.get(color)
        if p is None:
            p = self.plans[color] = _Plan(self, color)
        return p


class _Plan:
    """A part's layout as positions: `ins`/`ws` per input/weight, the index of its view or
    None; `douts` (output index, view index); `targets`: (IN or W, index) per DIN/DW view
    in order; `kept`: per output, whether the part has it (a non-empty rect). Also what a
    task needs every iteration, looked up once: the part's spec, whether it keeps every
    output, the weights' autograd leaves (`_weight_leaves`), and for an explicit backward
    which gradients it must give (`need_inputs`, `need_weights`)."""
    __slots__ = ("ins", "ws", "douts", "targets", "kept", "spec", "all_kept", "input_grads",
                 "weight_grads", "weight_views", "weight_leaves", "need_inputs",
                 "need_weights")

    def __init__(self, a: StageArgs, color):
        stage = a.stage
        ins, ws = [None] * len(stage.inputs), [None] * len(stage.weights)
        douts, targets = [], []
        for k, (group, idx) in enumerate(a.layouts[color]):
            if group == IN:
                ins[idx] = k
            elif group == W:
                ws[idx] = k
            elif group == DOUT:
                douts.append((idx, k))
            elif group == DIN:
                targets.append((IN, idx))
            elif group == DW:
                targets.append((W, idx))
        self.ins, self.ws, self.douts, self.targets = tuple(ins), tuple(ws), tuple(douts), \
            tuple(targets)
        self.spec = a.specs[color]
        self.kept = tuple(not r.empty for r in self.spec.outputs)
        self.all_kept = all(self.kept)
        self.input_grads = tuple(zip(self.ins, a.input_grads))
        self.weight_grads = tuple(zip(self.ws, a.weight_grads))
        self.weight_views: tuple = ()
        self.weight_leaves: list = []
        self.need_inputs = tuple((IN, i) in targets for i in range(len(stage.inputs)))
        self.need_weights = tuple((W, i) in targets for i in range(len(stage.weights)))


class _Explicit:
    """What a forward part saved for its op's own backward (Op.explicit_backward)."""
    __slots__ = ("saved",)

    def __init__(self, saved):
        self.saved = saved


def _leaves(views, positions_wanted):
    """Autograd leaves for the views at the positions (None where absent): `.data` aliases
    that require grad where wanted."""
    return [None if k is None or views[k] is None else views[k].data.requires_grad_(g)
            for k, g in positions_wanted]


def _weight_leaves(plan: _Plan, views) -> list:
    """The weights' leaves, made again only when a weight's view is a new tensor: weights
    are persistent instances updated in place, so their views (and leaves, as a module's
    parameters are) stay the same from one iteration to the next."""
    ws = tuple(None if k is None else views[k] for k in plan.ws)
    if len(ws) != len(plan.weight_views) or any(
            v is not old for v, old in zip(ws, plan.weight_views)):
        plan.weight_views = ws
        plan.weight_leaves = _leaves(views, plan.weight_grads)
    return plan.weight_leaves.copy()


def _picked(views, positions):
    return [None if k is None else views[k] for k in positions]


def _returned(outs, plan: _Plan):
    """The outputs a part returns: those it has (a single one bare)."""
    if plan.all_kept:
        return outs[0] if len(outs) == 1 else tuple(outs)
    return tuple(o for o, keep in zip(outs, plan.kept) if keep)


def part_views(stage, spec, make) -> tuple[list, list]:
    """A forward part's arguments made afresh (a part run in isolation): per non-empty input
    and weight rect of `spec`, in forward_task's order, its (IN or W, index) and
    make(rect, tensor)."""
    layout, views = [], []
    for group, tensors, rects in ((IN, stage.inputs, spec.inputs),
                                  (W, stage.weights, spec.weights)):
        for i, (t, r) in enumerate(zip(tensors, rects)):
            if not r.empty:
                layout.append((group, i))
                views.append(make(r, t))
    return layout, views


def forward_task(ctx, *views):
    a: StageArgs = ctx.args
    stage = a.stage
    stage.training = a.training
    plan = a.plans.get(ctx.color) or a.plan(ctx.color)
    if not a.grad:
        return _returned(stage.forward(plan.spec, _picked(views, plan.ins),
                                       _picked(views, plan.ws)), plan)
    if stage.explicit_backward:
        got = stage.forward_saving(plan.spec, _picked(views, plan.ins), _picked(views, plan.ws))
        if got is not None:
            ctx.saved = _Explicit(got[1])
            return _returned(got[0], plan)
    return _forward_autograd(ctx, stage, plan, views)


def _forward_autograd(ctx, stage, plan: _Plan, views):
    """forward_task's part run with autograd (the op's backward comes from its graph)."""
    ins = _leaves(views, plan.input_grads)
    ws = _weight_leaves(plan, views)
    was_enabled = _grad_enabled()
    _set_grad_enabled(True)
    try:
        outs = stage.forward(plan.spec, ins, ws)
    finally:
        _set_grad_enabled(was_enabled)
    ctx.saved = (ins, ws, outs)
    if plan.all_kept:
        return outs[0].detach() if len(outs) == 1 else tuple(o.detach() for o in outs)
    return tuple(o.detach() for o, keep in zip(outs, plan.kept) if keep)


def backward_task(ctx, *views):
    a: StageArgs = ctx.args
    plan = a.plans.get(ctx.color) or a.plan(ctx.color)
    state = ctx.take_state()
    if not plan.targets:
        return ()
    if type(state) is _Explicit:
        return _explicit_grads(a.stage, plan, state.saved, views, ctx.torch_device)
    return _autograd_grads(plan, state, views)


def _autograd_grads(plan: _Plan, state, views) -> list:
    """backward_task's result from the autograd graph a forward part kept."""
    ins, ws, outs = state
    targets = [ins[idx] if group == IN else ws[idx] for group, idx in plan.targets]
    ys, dys = [], []
    for idx, k in plan.douts:
        y = outs[idx]
        if y.requires_grad:
            ys.append(y)
            dys.append(views[k])
    if not ys:
        return tuple(torch.zeros_like(t) for t in targets)
    grads = _grads(ys, targets, dys)
    out = []
    for g, t in zip(grads, targets):
        out.append(torch.zeros_like(t) if g is None else g)
    return out


def _getter(positions):
    """A callable of the views giving the list of those at `positions` (None where a
    position is None): _picked with the loop decided once."""
    if any(k is None for k in positions):
        return lambda views: _picked(views, positions)
    if not positions:
        return lambda views: []
    if len(positions) == 1:
        k, = positions
        return lambda views: [views[k]]
    get = operator.itemgetter(*positions)
    return lambda views: list(get(views))


def bind_forward(ctx):
    """forward_task for one point, what it looks up done once (the plan, the stage, the
    positions of its inputs and weights among the views): a callable of the views only,
    running the same operations. The executors compile each task node with it
    (taskrt.executor.steps: a task function's `bind`)."""
    a: StageArgs = ctx.args
    stage = a.stage
    if not a.grad or not stage.explicit_backward:
        return functools.partial(forward_task, ctx)
    plan = a.plan(ctx.color)
    spec, training, saving = plan.spec, a.training, stage.forward_saving
    ins, ws = _getter(plan.ins), _getter(plan.ws)
    single = plan.all_kept and len(plan.kept) == 1

    def forward(*views):
        stage.training = training
        got = saving(spec, ins(views), ws(views))
        if got is None:
            return _forward_autograd(ctx, stage, plan, views)
        ctx.saved = _Explicit(got[1])
        return got[0][0] if single else _returned(got[0], plan)
    return forward


def bind_backward(ctx):
    """backward_task for one point, its look-ups done once (see bind_forward): the output
    gradients' positions, which gradients to give and where they come from."""
    a: StageArgs = ctx.args
    plan = a.plan(ctx.color)
    if not plan.targets or ctx.source is None:
        return functools.partial(backward_task, ctx)
    source, stage, spec = ctx.source, a.stage, plan.spec
    douts = [k for _, k in plan.douts]
    if [idx for idx, _ in plan.douts] != list(range(len(stage.outputs))):
        return functools.partial(backward_task, ctx)    # an output without a gradient
    douts = _getter(douts)
    backward, need_in, need_w = stage.backward, plan.need_inputs, plan.need_weights
    picks = tuple((0 if group == IN else 1, idx) for group, idx in plan.targets)

    def run(*views):
        state, source.saved = source.saved, None          # ctx.take_state()
        if type(state) is not _Explicit:
            return _autograd_grads(plan, state, views)
        got = backward(spec, state.saved, douts(views), need_in, need_w)
        return [got[g][i] for g, i in picks]
    return run


def empty_part(args: StageArgs, color) -> bool:
    """Whether a stage launch's point is an empty part (every rect of its spec empty, e.g.
    batch norm's statistics under a config that splits no sample dim): its forward and
    backward points then read, write and keep nothing. The executors may skip such points
    (the task functions' `idle`, taskrt.executor.local)."""
    spec = args.specs[color]
    return all(r.empty for group in (spec.inputs, spec.weights, spec.outputs) for r in group)


def order_only_reads(args: StageArgs, color) -> frozenset:
    """The requirements of a backward point that only order it (its saved inputs, weights
    and recomputed outputs: autograd's graph or the op's saved state holds what it needs of
    them; backward_task never reads their views), by index: an executor may pass None for
    them (taskrt.executor.instances: a light buffer dropped after its last real use)."""
    return frozenset(k for k, (group, _) in enumerate(args.layouts[color])
                     if group in (IN, W, OUT))


def capture_hazard(args: StageArgs, color) -> str | None:
    """Why a stage's part must run eagerly under CUDA-graph capture (its operator's
    `capture_hazard(spec)`: it reads a host value that changes per step, or syncs with the
    host), or None (taskrt.executor.capture; the backward part follows its forward)."""
    op = getattr(args.stage, "parent", None) or args.stage
    hazard = getattr(op, "capture_hazard", None)
    return hazard(args.specs.get(color)) if hazard is not None else None


def update_hazard(args, color) -> str:
    """Optimizer updates run eagerly under CUDA-graph capture: they read host numbers that
    change between steps (the step count: SGD momentum's first step, Adam's bias
    correction; a learning rate a schedule sets), which a graph would bake in. A device's
    updates are one multi-tensor call (update_batch), so this costs little."""
    return "the optimizer update reads its step count and learning rate on the host"


forward_task.idle = backward_task.idle = empty_part
forward_task.capture_hazard = backward_task.capture_hazard = capture_hazard
forward_task.bind, backward_task.bind = bind_forward, bind_backward
backward_task.unread = order_only_reads
# They never write their WD views in place: they return the values (or None, unwritten);
# taskrt.executor.steps: an output's buffer may then have no storage until it adopts one.
forward_task.fresh_outputs = backward_task.fresh_outputs = True


def _explicit_grads(stage, plan: _Plan, saved, views, device) -> list:
    """backward_task's result from the op's own backward (Op.explicit_backward)."""
    if not plan.douts:                              # nothing flows back: zero gradients
        spec = plan.spec
        return [torch.zeros((spec.inputs if group == IN else spec.weights)[idx].shape,
                            dtype=getattr(torch, (stage.inputs if group == IN
                                                  else stage.weights)[idx].dtype),
                            device=device) for group, idx in plan.targets]
    douts = [None] * len(stage.outputs)
    for idx, k in plan.douts:
        douts[idx] = views[k]
    din, dw = stage.backward(plan.spec, saved, douts, plan.need_inputs, plan.need_weights)
    return [din[idx] if group == IN else dw[idx] for group, idx in plan.targets]


def update_task(ctx, weight, grad, *states):
    """Apply the optimizer to one weight part in place (every replica does the same)."""
    ctx.args.update(weight, grad, states)
    return (None,) * (1 + len(states))


def update_batch(ctxs, tensors):
    """update_task of several weight parts at once: one multi-tensor optimizer call
    (`update_many`, equal to `update` on each part in turn)."""
    ctxs[0].args.update_many([t[0] for t in tensors], [t[1] for t in tensors],
                             [t[2:] for t in tensors])


update_task.capture_hazard = update_hazard


def read_task(ctx, *views):
    """A task that only reads: it moves a value to a device (e.g. the loss to device 0)."""
    return ()
