"""The task functions every lowered launch runs: forward with autograd, backward, update.

Instance views are handed to autograd through `.data` aliases: they share storage but not
the version counter, so later copies into other parts of the same instance do not trip
autograd's saved-tensor checks (activations are written once per iteration, so what a
forward part saved is unchanged when its backward runs).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

IN, W, OUT, DOUT, DIN, DW, STATE = "in", "w", "out", "dout", "din", "dw", "state"

# torch.autograd.grad validates and normalizes its arguments in Python on every call (tens of
# microseconds); the lowering already guarantees matching shapes and dtypes, so call the
# engine directly when this torch has it.
_ENGINE = getattr(torch.autograd.Variable, "_execution_engine", None)


def _grads(ys, xs, dys):
    """Gradients of ys w.r.t. xs for output gradients dys (None where xs is unused)."""
    if _ENGINE is not None:
        return _ENGINE.run_backward(tuple(ys), tuple(dys), False, False, tuple(xs), True, False)
    return torch.autograd.grad(ys, xs, dys, allow_unused=True)


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


def _unpack(layout, views, n_in: int, n_w: int):
    ins = [None] * n_in
    ws = [None] * n_w
    douts = {}
    for (group, idx), v in zip(layout, views):
        if group == IN:
            ins[idx] = v
        elif group == W:
            ws[idx] = v
        elif group == DOUT:
            douts[idx] = v
    return ins, ws, douts


def forward_task(ctx, *views):
    a: StageArgs = ctx.args
    stage = a.stage
    stage.training = a.training
    spec = a.specs[ctx.color]
    ins, ws, _ = _unpack(a.layouts[ctx.color], views, len(stage.inputs), len(stage.weights))
    if a.grad:
        ins = [None if v is None else v.data.requires_grad_(g)
               for v, g in zip(ins, a.input_grads)]
        ws = [None if v is None else v.data.requires_grad_(g)
              for v, g in zip(ws, a.weight_grads)]
        with torch.enable_grad():
            outs = stage.forward(spec, ins, ws)
        ctx.saved = (ins, ws, outs)
        return tuple(o.detach() for o, r in zip(outs, spec.outputs) if not r.empty)
    outs = stage.forward(spec, ins, ws)
    return tuple(o for o, r in zip(outs, spec.outputs) if not r.empty)


def backward_task(ctx, *views):
    a: StageArgs = ctx.args
    stage = a.stage
    layout = a.layouts[ctx.color]
    ins, ws, outs = ctx.take_state()
    _, _, douts = _unpack(layout, views, len(stage.inputs), len(stage.weights))
    targets = []
    for group, idx in layout:
        if group == DIN:
            targets.append(ins[idx])
        elif group == DW:
            targets.append(ws[idx])
    ys, dys = [], []
    for idx, dy in douts.items():
        y = outs[idx]
        if y.requires_grad:
            ys.append(y)
            dys.append(dy)
    if not targets:
        return ()
    if ys:
        with torch.enable_grad():
            grads = _grads(ys, targets, dys)
    else:
        grads = (None,) * len(targets)
    return tuple(torch.zeros_like(t) if g is None else g for g, t in zip(grads, targets))


def update_task(ctx, weight, grad, *states):
    """Apply the optimizer to one weight part in place (every replica does the same)."""
    ctx.args.update(weight, grad, states)
    return (None,) * (1 + len(states))


def read_task(ctx, *views):
    """A task that only reads: it moves a value to a device (e.g. the loss to device 0)."""
    return ()
