"""What a run measured (`Result`) and how rank 0 reports it: the end report for people
(`report`), the --json object (`result_json`), and the counts and machine description both
use. The strategy table the apps print is strategy/views.py's, re-exported here.

Owns no MPI and no training: apps/training.py fills the Result and prints these.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from parallel_ops import Model
from strategy.views import strategy_table  # noqa: F401  (re-exported: the apps print it)
from taskrt import Machine

from .app import App, Network
from .runconfig import RunConfig


@dataclass
class Result:
    """One run: its set-up, the loss of every iteration and the time of each timed one."""
    app: App
    config: RunConfig
    network: Network
    machine: Machine
    trainer: object
    strategy_name: str
    losses: list[float]
    times: list[float]                 # seconds per timed iteration
    accuracies: list[float] = field(default_factory=list)
    test_accuracy: float | None = None
    rank: int = 0
    search: object | None = None       # the SearchResult of --search
    checkpoints: int = 0               # checkpoints written ...
    checkpoint_s: float = 0.0          # ... and their time, apart from the iterations'
    nonfinite_from: int | None = None  # first iteration with a nan/inf loss (--continue-on-nan)
    # The timed iterations' period: the wall time from a mark before them to one after them
    # (perf_counter; under MPI each after a barrier of every rank, so it covers every rank's
    # iterations whole), less the app's own work between steps in it (besides_s: making the
    # feeds, --data digits' accuracy, checkpoints), over their number. A run whose ranks'
    # iterations overlap (one rank ahead of another) alternates short and long iteration
    # times; the period is what the simulator's iteration time predicts.
    period_s: float | None = None
    timed_from: float | None = None
    timed_to: float | None = None
    besides_s: float = 0.0
    speed_reference: dict | None = None  # --trace: this rank's strategy/speedref.py timings
    traced_s: float | None = None      # --trace: the traced last iteration, when kept apart

    @property
    def iteration_time(self) -> float:
        return statistics.median(self.times)

    @property
    def samples_per_s(self) -> float:
        return self.config.batch_size / self.iteration_time

    def json(self) -> dict:
        return result_json(self)


def machine_text(machine: Machine) -> str:
    """E.g. '4 cpu devices on 2 ranks'."""
    kinds = "/".join(sorted({d.kind for d in machine.devices}))
    n, r = len(machine), machine.num_ranks
    return f"{n} {kinds} device{'s' if n > 1 else ''} on {r} rank{'s' if r > 1 else ''}"


def parameters(model: Model) -> int:
    """Trainable scalars (what torch's sum(p.numel() for p in parameters()) counts)."""
    return sum(math.prod(w.shape) for w in model.weights if w.requires_grad)


def report(res: Result) -> str:
    """The end report rank 0 prints: times, throughput, loss, graph counts, accuracy."""
    a, g = res.config, res.trainer.graph
    c = g.count()
    lo, hi = min(res.times), max(res.times)
    between = " between barriers of every rank" if res.machine.num_ranks > 1 else ""
    lines = [f"Done: {res.app.title}{' --small' if a.small else ''} on "
             f"{machine_text(res.machine)}, batch {a.batch_size}, strategy {res.strategy_name}",
             f"  iteration time  median {1e3 * res.iteration_time:.1f} ms (min {1e3 * lo:.1f}, "
             f"max {1e3 * hi:.1f}) over {len(res.times)} iterations after {a.warmup} warm-up",
             *([f"  period          {1e3 * res.period_s:.1f} ms an iteration (the timed "
                f"iterations{between}, their feeds not counted)"] if res.period_s else []),
             *([f"  traced          {1e3 * res.traced_s:.1f} ms, the last iteration "
                f"(--trace; not in the times or the period)"] if res.traced_s else []),
             f"  throughput      {res.samples_per_s:.1f} samples/s, "
             f"{res.samples_per_s / len(res.machine):.1f} per device",
             f"  loss            {res.losses[0]:.5f} (first) -> {res.losses[-1]:.5f} (last)"
             + (f", not finite from iteration {res.nonfinite_from}"
                if res.nonfinite_from else ""),
             f"  per iteration   {c['task']} tasks, {c['copy']} copies, {c['reduce']} "
             f"reductions, {c['allreduce']} all-reduces, {g.bytes_moved() / 1e6:.3f} MB moved"]
    if res.checkpoints:
        lines.append(f"  checkpoints     {res.checkpoints} written in {res.checkpoint_s:.2f} s "
                     "(not in the iteration times)")
    if res.accuracies:
        lines.append(f"  train accuracy  {res.accuracies[0]:.3f} (first batch) -> "
                     f"{res.accuracies[-1]:.3f} (last batch)")
    if res.test_accuracy is not None:
        lines.append(f"  test accuracy   {res.test_accuracy:.3f} on the held-out digits")
    return "\n".join(lines)


def _finite(x):
    return x if x is not None and math.isfinite(x) else None


def idle_schedule(trainer) -> dict | None:
    """The trainer's executor's idle schedule (taskrt/executor/policies.py IdleSchedule) as
    plain JSON, or None where its executor has none (LocalExecutor)."""
    schedule = getattr(getattr(trainer, "executor", None), "schedule", None)
    return schedule.to_dict() if schedule is not None else None


def result_json(res: Result) -> dict:
    """The --json object: the keys every result has first (through "strategy"), then
    details. A --simulate Prediction (apps/simulate.py) gives its own object with the same
    first keys."""
    if getattr(res, "simulated", False):
        return res.json()
    a = res.config
    out = {"app": res.app.name,
           "parameters": parameters(res.network.model),
           "batch_size": a.batch_size,
           "iterations": a.iterations,
           "devices": len(res.machine),
           "machine": machine_text(res.machine),
           "simulated": False,
           "iteration_time_s": res.iteration_time,
           "samples_per_s": res.samples_per_s,
           "loss": _finite(res.losses[-1]),
           "strategy": res.strategy_name,
           # details
           "samples_per_s_per_device": res.samples_per_s / len(res.machine),
           "ranks": res.machine.num_ranks,
           "small": a.small,
           "dtype": a.dtype,
           "seed": a.seed,
           "warmup": a.warmup,
           "losses": [_finite(x) for x in res.losses],
           "iteration_times_s": res.times,
           "iteration_period_s": res.period_s,
           "traced_iteration_s": res.traced_s,
           # how the MPI executor's waiting ranks waited (policies.IdleSchedule; None in
           # one process without MPI)
           "idle_schedule": idle_schedule(res.trainer),
           "checkpoints": res.checkpoints,
           "checkpoint_s": res.checkpoint_s,
           "operators": len(res.network.model.ops),
           "graph": dict(res.trainer.graph.count(),
                         bytes_moved=res.trainer.graph.bytes_moved())}
    if res.accuracies:
        out["accuracies"] = res.accuracies
        out["test_accuracy"] = res.test_accuracy
    if res.search is not None:
        out["search"] = res.search.to_dict()
    return out
