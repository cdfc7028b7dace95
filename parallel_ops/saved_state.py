"""Saved state: the bytes a forward part keeps for its backward that are not regions.

A forward task that keeps state for its backward launch (parallel_ops.tasks.forward_task:
an autograd graph, or what an op's forward_saving() returns) holds tensors besides its
inputs, weights and outputs, which are regions the memory model already counts: attention's
projected queries, keys and values, its probabilities (batch x heads x s x s) and its
context; the pre-activation of a linear layer with a fused GELU; a dropout's mask; a layer
norm's mean and 1/std. Those bytes live on the part's device from its forward task (or its
recompute task, when its segment is recomputed: the plain forward then keeps nothing) to
its backward task.

`saved_bytes` finds them by running forward_task exactly as the executors do, on meta
tensors of the part's shapes (no data, no FLOPs; on CPU zeros for an operator whose code
needs values, such as an embedding's index check): the storages autograd saves (saved-tensor
hooks) or forward_saving returns, less those of the part's inputs, weights and outputs. So
every operator is covered, dtype by dtype (bfloat16 activations keep bfloat16 state), with
nothing to declare by hand; an operator's own code decides it. An operator may declare
them instead (Op.saved_state_bytes, from part shapes and dtypes, no tensor made; a stage
through Stage(saved_state=), as an LSTM's steps): then they are not measured and no cache
key is made; tests/test_saved_state_declared.py compares every declaration with the
measurement. Measured results are cached per stage type, parameters, part shapes and
dtypes (a search asks for the same parts many times).

Assumptions (docs/large_models.md): a part's inputs arrive as contiguous tensors of its
rects (its device holds that part alone), and an output that covers its instance becomes
the instance (taskrt.executor.instances, "Adoption"), so autograd's saved output is the
region's buffer.
"""
from __future__ import annotations

import torch

from taskrt.executor.steps import TaskContext

from .op import declaration_holds
from .tasks import OUT, StageArgs, _Explicit, forward_task, part_views

_CACHE: dict = {}


class _Launch:
    """What forward_task reads of its launch."""

    def __init__(self, args):
        self.name, self.args = "saved_state", args


def _storages(tensors) -> dict[int, int]:
    """Storage id -> bytes of the tensors (None and non-tensors skipped)."""
    out = {}
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.numel():
            s = t.untyped_storage()
            out[s._cdata] = s.nbytes()
    return out


def _flat(x) -> list:
    if isinstance(x, (tuple, list)):
        return [y for item in x for y in _flat(item)]
    return [x]


def _stage_key(stage, input_grads, weight_grads) -> tuple:
    """What of the cache key is the same for every part of a stage."""
    return (type(stage), stage.cost_tag, stage.training, stage.explicit_backward,
            tuple(t.dtype for t in stage.inputs + stage.weights + stage.outputs),
            tuple(input_grads), tuple(weight_grads))


def _part_key(stage, spec) -> tuple:
    info = stage.state_info(spec.info)
    try:
        hash(info)
    except TypeError:
        info = repr(info)
    return (info, spec.partial, tuple(r.shape for r in spec.inputs),
            tuple(r.shape for r in spec.weights), tuple(r.shape for r in spec.outputs))


def saved_bytes(stage, spec, input_grads, weight_grads, device: str = "meta") -> int:
    """Bytes one forward part of `stage` (PartSpec `spec`) keeps for its backward besides its
    regions, as forward_task keeps them on `device` (meta: shapes only, cached) with the
    inputs and weights that want gradients (StageArgs.input_grads, weight_grads)."""
    if device != "meta":
        return _measure(stage, spec, tuple(input_grads), tuple(weight_grads), device)
    return saved_bytes_of_parts(stage, {0: spec}, input_grads, weight_grads)[0]


def saved_bytes_of_parts(stage, specs: dict, input_grads, weight_grads) -> dict:
    """saved_bytes (on meta, cached) of every part {color: PartSpec} of one stage: the
    stage's share of the cache key is made once (a launch has up to thousands of parts)."""
    input_grads, weight_grads = tuple(input_grads), tuple(weight_grads)
    head = _stage_key(stage, input_grads, weight_grads)
    declared = declaration_holds(stage, "saved_state_bytes")
    out = {}
    for color, spec in specs.items():
        # A declaration answers without the cache key (the part's shapes: most of the cost
        # of a declared part); the key is made for the parts it leaves to the measure.
        got = stage.saved_state_bytes(spec, input_grads, weight_grads) if declared else None
        if got is None:
            key = (head, _part_key(stage, spec))
            got = _CACHE.get(key)
            if got is None:
                try:
                    got = _measure(stage, spec, input_grads, weight_grads, "meta")
                except RuntimeError:
                    # Data-dependent code (an index check) cannot run on meta tensors: CPU
                    # zeros (valid indices), once per key, as the cost model counts such
                    # parts.
                    got = _measure(stage, spec, input_grads, weight_grads, "cpu")
                _CACHE[key] = got
        out[color] = got
    return out


def _measure(stage, spec, input_grads, weight_grads, device: str) -> int:
    def make(rect, t):
        dt = getattr(torch, t.dtype)
        if dt.is_floating_point:            # values unused: shapes only
            return torch.empty(rect.shape, dtype=dt, device=device)
        return torch.zeros(rect.shape, dtype=dt, device=device)     # valid indices
    layout, views = part_views(stage, spec, make)
    layout += [(OUT, i) for i, r in enumerate(spec.outputs) if not r.empty]
    args = StageArgs(stage, {(0,): spec}, {(0,): tuple(layout)}, True, input_grads,
                     weight_grads, stage.training)
    ctx = TaskContext(_Launch(args), (0,), 0, device)
    packed: list = []

    def pack(t):
        packed.append(t)
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        outs = forward_task(ctx, *views, *([None] * (len(layout) - len(views))))
    saved = ctx.saved
    regions = _storages(views)
    regions.update(_storages(_flat(outs)))
    if type(saved) is _Explicit:
        packed = _flat(saved.saved)
    elif saved is not None:                     # autograd's outputs (outs are detached)
        regions.update(_storages(_flat(saved[2])))
    return sum(n for s, n in _storages(packed).items() if s not in regions)
