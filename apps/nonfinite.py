"""A loss that is nan or inf: what the run says when it stops (`nonfinite_report`).

Checking the loss costs nothing (every iteration reads it already). Only when it is not
finite does the run look further, once: it reads the weights, then runs the same batch
through a diagnostic trainer on the same devices and strategy that keeps every tensor, and
names the first operator, in model order, whose output is not finite, and whether its inputs
and weights were. The weights are those after the iteration's update: when that update made
them non-finite (a diverging learning rate), the message says so, since the operator named
is then the first with non-finite weights rather than the one that overflowed; keeping the
weights of every iteration to avoid that would cost a copy of the model per step.

Under MPI every rank calls it (reads and the diagnostic trainer are collective).
"""
from __future__ import annotations

import math

import torch


def _finite(t: torch.Tensor) -> bool:
    return not t.is_floating_point() or bool(torch.isfinite(t).all())


def _names(names: list[str], k: int = 4) -> str:
    more = f" and {len(names) - k} more" if len(names) > k else ""
    return ", ".join(f"'{n}'" for n in names[:k]) + more


def first_nonfinite_operator(trainer, feeds: dict) -> str:
    """'<type> '<name>' (...)' for the first operator whose output is not finite on `feeds`
    with the trainer's weights as they are now, or why none was found."""
    from parallel_ops.trainer import Trainer
    model = trainer.model
    step = model.step_count
    try:
        probe = Trainer(model, trainer.machine, trainer.configs, optimizer=None,
                        executor="mpi" if hasattr(trainer.executor, "comm") else "local",
                        keep="all")
        for w in model.weights:
            if w.name in probe.graph.initial_valid:
                probe.set_weight(w.name, trainer.read(w.name))
        probe.step(feeds)
        for op in model.ops:
            for out in op.outputs:
                if not _finite(probe.read(out.name)):
                    inputs = [t.name for t in op.inputs if not _finite(probe.read(t.name))]
                    weights = [w.name for w in op.weights
                               if w.name in probe.graph.regions
                               and not _finite(probe.read(w.name))]
                    why = (f"non-finite inputs {_names(inputs)}" if inputs else
                           f"finite inputs, non-finite weights {_names(weights)}" if weights
                           else "finite inputs and weights")
                    return f"{op.type} '{op.name}' (output '{out.name}'; {why})"
        return "none: every output is finite when this batch runs again"
    except Exception as e:               # a diagnosis must never hide the real message
        return f"not found (the diagnostic pass failed: {type(e).__name__}: {e})"
    finally:
        model.step_count = step


def nonfinite_report(trainer, feeds: dict, iteration: int, loss: float) -> str:
    """Why the run stops at `iteration` (1-based), with its first non-finite operator."""
    bad = [w.name for w in trainer.model.weights if w.name in trainer.graph.regions
           and not _finite(trainer.read(w.name))]
    kind = "nan" if math.isnan(loss) else "inf"
    lines = [f"the loss is {kind} at iteration {iteration}."]
    if bad:
        lines.append(f"  this iteration's update made {len(bad)} of "
                     f"{len(trainer.model.weights)} weights non-finite ({_names(bad)}); the "
                     "pass below runs the batch again with them, not with the weights the "
                     "iteration used.")
    lines.append(f"  first operator whose output is not finite on this batch: "
                 f"{first_nonfinite_operator(trainer, feeds)}")
    lines.append("  Lower the learning rate (--lr), check the data, or pass --continue-on-nan "
                 "to keep training anyway.")
    return "\n".join(lines)
