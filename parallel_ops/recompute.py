"""Activation recomputation: which operators keep nothing from their forward for backward.

A *segment* is a set of operators (a transformer block, or one attention operator) whose
forward keeps no autograd state and whose activations inside the segment are dropped after
the forward; at the start of the segment's backward its forward runs again from the
segment's inputs, this time keeping what backward needs (torch.utils.checkpoint's semantics:
the tensors entering and leaving a segment are kept, those between its operators are not).

In the lowering (parallel_ops/lowering.py) this is nothing but launches and regions:
  <stage>/fwd        runs without autograd (keeps nothing);
  <stage>/recompute  the same forward again, placed before the first backward launch of its
                     segment (every recompute launch of a segment in program order), reading
                     `<t>@re` for a tensor t made inside the segment and t itself otherwise,
                     writing its outputs to `<t>@re`; it keeps the autograd state;
  <stage>/bwd        takes its state from the recompute launch (state_from) and reads the
                     inputs the recompute read.
So the planner, the executors, the simulator and the memory model need nothing new: the
extra forward is an ordinary forward task (same cost key, so the same time), a dropped
activation is a temporary whose last user is the forward, and the recomputed one
(`<t>@re`) a temporary alive from the recompute to the last backward reading it.

    set_recompute(model, [["h0/ln_1", "h0/attn", ...], ["h1/ln_1", ...]])   # per block
    model.compile(machine, strategy, Adam())    # and lower/simulate/search as usual

Not recomputable: the loss (its forward writes the logits' gradient) and operators whose
forward writes a weight (running statistics would be updated twice).
"""
from __future__ import annotations

from typing import Iterable

from .errors import ConfigError

RECOMPUTED = "@re"          # suffix of a recomputed activation's region


def recomputed_name(tensor_name: str) -> str:
    return tensor_name + RECOMPUTED


def recomputable(op) -> str | None:
    """Why `op` cannot be recomputed, or None when it can."""
    for stage in op.stages():
        if any(t.name.endswith("@grad") for t in stage.outputs):
            return "its forward writes a gradient (a loss)"
        if any(getattr(t, "is_weight", False) for t in stage.outputs):
            return "its forward writes a weight (running statistics)"
    return None


def set_recompute(model, segments: Iterable[Iterable[str]]) -> None:
    """Recompute each segment (operator names) in backward; replaces any earlier choice.
    Raises ConfigError naming every operator that is unknown, not recomputable, or in two
    segments."""
    ops = {op.name: op for op in model.ops}
    chosen: dict[str, int] = {}
    problems = []
    for k, seg in enumerate(segments):
        for name in seg:
            op = ops.get(name)
            if op is None:
                problems.append(f"'{name}' is not an operator of model '{model.name}'")
            elif name in chosen:
                problems.append(f"'{name}' is in segments {chosen[name]} and {k}")
            elif (why := recomputable(op)) is not None:
                problems.append(f"'{name}' ({op.type}) cannot be recomputed: {why}")
            else:
                chosen[name] = k
    if problems:
        raise ConfigError("recompute: " + "; ".join(problems) + ". Leave those operators "
                          "out of the segments.")
    model.recompute = chosen


def segments_of(model) -> list[list[str]]:
    """The model's segments, each in program order."""
    out: dict[int, list[str]] = {}
    for op in model.ops:
        k = model.recompute.get(op.name)
        if k is not None:
            out.setdefault(k, []).append(op.name)
    return list(out.values())


def per_block(model, block_of) -> list[list[str]]:
    """Full recomputation: one segment per block, `block_of(op)` naming an operator's block
    (None: not in any), leaving out what cannot be recomputed."""
    out: dict = {}
    for op in model.ops:
        b = block_of(op)
        if b is not None and recomputable(op) is None:
            out.setdefault(b, []).append(op.name)
    return list(out.values())


def per_op(model, op_type: str) -> list[list[str]]:
    """Selective recomputation: each operator of `op_type` its own segment (for attention:
    its scores and probabilities are not kept; its inputs and output are)."""
    return [[op.name] for op in model.ops if op.type == op_type and recomputable(op) is None]


__all__ = ["RECOMPUTED", "recomputed_name", "recomputable", "set_recompute", "segments_of",
           "per_block", "per_op"]
