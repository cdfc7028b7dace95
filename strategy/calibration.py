"""Calibration from recorded runs: a machine model with host costs and a profile of in-situ
task times, fitted to the `--trace` files of real runs (`python -m strategy calibrate`).

What a trace determines (docs/simulator.md):
  task times    per cost key, the mean (and min, max) of its task events in the runs: a
                task inside an iteration runs slower than alone in the profiler, so these
                are the times to simulate with. The mean, not the median: on a shared
                machine some instances of a key are preempted (0.4 ms steps that took 9 ms
                at a load of 5 on 2 cores), and what an iteration pays is the expected time. With a base profile (the profiler's times,
                alone), the keys the runs did not see get the profiler's time scaled by the
                fitted line in-situ = a + f * alone, so a strategy never run is costed alike;
  host costs    per node kind (simulator.py's host model): the executor's time between one
                event and the next on a rank (taking the next instruction, polling MPI,
                allocating) is the mean gap before events of that kind (with several
                ranks, of the gaps at most 10x their median: longer ones are waits for a
                message, which the simulator models itself); for nodes whose
                whole event is host work (send = pack + Isend, recv = unpack, an
                all-reduce's start = pack + Iallreduce) the event itself, fitted as
                seconds + per_byte * bytes; for local copies and reductions, what the event
                takes beyond the device model's memory time.
  the iteration factor  what the recorded iterations still take beyond the simulation of
                them with the above (the median of measured / predicted over the runs,
                refined once), applied to task times and host costs. It stands for what
                the model leaves out: when MPI progresses messages, and on a shared machine
                preemption, which two ranks that synchronize pay at every exchange (one
                rank's delay stalls the other). Near 1 for one process; `factor=False`
                (--no-factor) leaves it out.
What it does not: link latency and bandwidth (a message's arrival is seen only when the
receiving thread next polls, so the traces bound them loosely) and the end of an all-reduce
(no event marks it); those stay the base machine's (calibrate_local's ping-pongs and
all-reduce fit), and the residuals show what they leave.

All traces of one calibration must share one layout (ranks x devices per rank): 1 process
runs taskrt's LocalExecutor, several run the MPIExecutor, whose costs differ.
"""
from __future__ import annotations

import math
import statistics
import warnings
from dataclasses import dataclass, field

import numpy as np

from taskrt.taskgraph import ALLREDUCE, COPY

from .costs import CostModel, CostWarning, Profile
from .costs.profile import Measurement
from .machines import HOST_KINDS, HostCost
from .replay import ReplayError, measured_times, model_for_layout, recorded, task_durations
from .simulator import NodeTimer, simulate


class CalibrationError(ValueError):
    """Traces that cannot be calibrated from together, or a bad base model."""


@dataclass
class RecordedRun:
    path: str
    app: str
    argv: list
    ranks: int
    per_rank: int
    graph: object
    events: list
    int_ranges: dict
    measured_s: float               # the traced iteration's span (longest rank)


@dataclass
class Fit:
    """What calibrate() fitted, with the spread of its samples."""
    host_costs: dict                # kind -> HostCost
    samples: dict                   # kind -> number of events it was fitted from
    spread: dict                    # kind -> (25th, 75th percentile) of the per-node cost, s
    insitu_keys: int                # cost keys timed in the runs
    scaled_keys: int = 0            # keys of the base profile scaled to in-situ
    scale: tuple | None = None      # (a, f): in-situ = a + f * alone, from the common keys
    residuals: list = field(default_factory=list)   # (run, measured s, predicted s)
    factor: float = 1.0             # the iteration factor (1: none fitted)
    unscaled: tuple | None = None   # (model, profile) before the iteration factor

    def text(self) -> str:
        lines = ["host costs per node kind (mean gap before its events + event host work):"]
        for kind in HOST_KINDS:
            c = self.host_costs.get(kind)
            if c is None:
                continue
            lo, hi = self.spread.get(kind, (math.nan, math.nan))
            lines.append(f"  {kind:<16} {c.seconds * 1e6:8.2f} us + {c.per_byte * 1e9:7.3f} "
                         f"ns/byte  ({self.samples.get(kind, 0)} events; per node 25-75% "
                         f"{lo * 1e6:.1f}-{hi * 1e6:.1f} us)")
        lines.append(f"task times: {self.insitu_keys} cost keys in situ")
        if self.scale:
            a, f = self.scale
            lines.append(f"  + {self.scaled_keys} keys of the base profile scaled: in-situ = "
                         f"{a * 1e6:.1f} us + {f:.3f} x alone")
        if self.factor != 1.0:
            lines.append(f"iteration factor {self.factor:.3f} (task times and host costs; "
                         "what the runs take beyond their simulation)")
        if self.residuals:
            lines.append("residuals (the recorded runs simulated with this calibration):")
            for name, m, p in self.residuals:
                lines.append(f"  {name:<44} measured {m * 1e3:8.2f} ms  predicted "
                             f"{p * 1e3:8.2f} ms  {100 * (p - m) / m:+6.1f}%")
            errs = [abs(p - m) / m for _, m, p in self.residuals]
            lines.append(f"  median |error| {100 * statistics.median(errs):.1f}%, worst "
                         f"{100 * max(errs):.1f}%")
        return "\n".join(lines)


def load_runs(paths) -> list[RecordedRun]:
    """The recorded runs of trace files, graphs rebuilt and checked (strategy.replay)."""
    runs = []
    for path in paths:
        workload, argv, (ranks, per_rank, kind), built, graph, events = recorded(None, None,
                                                                                 path)
        if kind != "cpu":
            raise CalibrationError(f"trace {path}: recorded on {kind} devices, whose events "
                                   "time the host's issue of each task, not its kernel; "
                                   "calibrate from CPU runs (profile GPUs with python -m "
                                   "strategy.costs profile --device cuda)")
        runs.append(RecordedRun(str(path), workload.name, list(argv), ranks, per_rank, graph,
                                events, built.int_ranges, measured_times(events)[1]))
    layouts = {(r.ranks, r.per_rank) for r in runs}
    if len(layouts) > 1:
        raise CalibrationError("calibrate: the traces have different layouts (ranks x "
                               f"devices per rank: {sorted(layouts)}); calibrate each layout "
                               "on its own (one process and several ranks run different "
                               "executors)")
    return runs


# -- host costs ---------------------------------------------------------------------------
def host_kind(node, rank: int, machine) -> str:
    """The host-cost kind of a node's event on `rank` (simulator.NodeTimer.host_phases)."""
    if node.kind is COPY:
        src, dst = machine.devices[node.src].rank, machine.devices[node.dst].rank
        if src == dst:
            return "copy"
        return "send" if rank == src else "recv"
    if node.kind is ALLREDUCE:
        return "allreduce_start"
    return node.kind


# Kinds whose whole event is host work (no device phase is timed in it).
ALL_HOST = ("send", "recv", "allreduce_start")


def host_samples(run: RecordedRun, device_time) -> dict:
    """kind -> list of (gap before the event, event seconds beyond the modelled device time,
    bytes) over every rank's events; `device_time(node)` is the device phase the model
    gives a node whose event holds one (local copies, reductions)."""
    per_rank: dict = {}
    for e in run.events:
        if e.get("ph") == "X" and "node" in (e.get("args") or {}):
            per_rank.setdefault(e.get("pid", 0), []).append(e)
    out: dict = {}
    g = run.graph
    for rank, evs in per_rank.items():
        evs.sort(key=lambda e: e["ts"])
        prev_end = None
        for e in evs:
            node = g.nodes[int(e["args"]["node"])]
            start, dur = e["ts"] / 1e6, e["dur"] / 1e6
            gap = max(0.0, start - prev_end) if prev_end is not None else None
            prev_end = start + dur
            kind = host_kind(node, rank, g.machine)
            one_rank = kind == "allreduce_start" and len(
                {g.machine.devices[d].rank for d in node.devices}) == 1
            if kind == "task":
                extra = 0.0                       # the event is the task's in-situ time
            elif kind in ALL_HOST and not one_rank:
                extra = dur
            else:
                extra = dur - device_time(node)
            out.setdefault(kind, []).append((gap, extra, getattr(node, "nbytes", 0)))
    return out


def _line(xs, ys, most: int = 400) -> tuple[float, float]:
    """(a, b) >= 0 of y = a + b x, robustly (Theil-Sen: b the median slope of the pairs of
    points of different x, a the median of y - b x), so that a message that waited or a
    preempted event does not tilt it; at most `most` points (evenly spaced) are paired."""
    x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    if len(x) > most:
        pick = np.linspace(0, len(x) - 1, most).astype(int)
        x, y = x[pick], y[pick]
    i, j = np.triu_indices(len(x), 1)
    dx = x[j] - x[i]
    ok = dx != 0
    if not ok.any():
        return max(0.0, float(np.median(y))), 0.0
    b = max(0.0, float(np.median((y[j] - y[i])[ok] / dx[ok])))
    return max(0.0, float(np.median(y - b * x))), b


def _typical_gap(gaps) -> float:
    """The mean of the gaps at most 10x their median: the executor's own time per node,
    without the waits for a message and the preemptions (a 12 ms gap among 15 us ones on a
    shared machine) that a plain mean would spread over every node."""
    if not gaps:
        return 0.0
    cut = 10 * statistics.median(gaps)
    kept = [g for g in gaps if g <= cut]
    return statistics.fmean(kept) if kept else 0.0


def fit_host_costs(samples: dict, waits: bool = True) -> tuple[dict, dict, dict]:
    """(kind -> HostCost, kind -> sample count, kind -> (25%, 75%) of per-node cost).
    `waits`: whether a gap may be a wait for another rank (several ranks), else every gap
    is the executor's or the OS's time and counts in full."""
    costs, counts, spread = {}, {}, {}
    for kind, rows in samples.items():
        gaps = [g for g, _, _ in rows if g is not None]
        gap = _typical_gap(gaps) if waits else (statistics.fmean(gaps) if gaps else 0.0)
        if kind == "task":
            a, b = 0.0, 0.0
        else:
            a, b = _line([n for _, _, n in rows], [x for _, x, _ in rows])
        costs[kind] = HostCost(gap + a, b)
        per_node = [(g or 0.0) + max(0.0, x) for g, x, _ in rows]
        q = np.percentile(per_node, [25, 75]) if per_node else (0.0, 0.0)
        counts[kind], spread[kind] = len(rows), (float(q[0]), float(q[1]))
    return costs, counts, spread


# -- task times -----------------------------------------------------------------------------
def insitu_profile(runs, base: Profile | None = None) -> tuple[Profile, tuple | None, int]:
    """(profile, (a, f) or None, keys scaled): the runs' task times per cost key, plus the
    base profile's other "cpu" keys scaled by in-situ = a + f * alone fitted on the common
    keys (relative least squares)."""
    durations: dict = {}
    for r in runs:
        task_durations(r.graph, r.events, durations)
    prof = Profile(meta={"runs": [{"source": "calibrate", "trace": r.path, "app": r.app,
                                   "argv": r.argv, "kind": "cpu",
                                   "layout": f"{r.ranks}x{r.per_rank}"} for r in runs]})
    for key, ts in durations.items():
        prof.add(key, "cpu", Measurement(statistics.fmean(ts), len(ts), min(ts), max(ts)))
    if base is None:
        return prof, None, 0
    common = [(base.get(k, "cpu").seconds, prof.get(k, "cpu").seconds)
              for k in durations if base.get(k, "cpu") is not None]
    if len(common) < 3:
        return prof, None, 0
    alone, insitu = (np.array(v) for v in zip(*common))
    w = 1.0 / insitu                                  # relative errors
    A = np.stack([w, alone * w], axis=1)
    (a, f), *_ = np.linalg.lstsq(A, insitu * w, rcond=None)
    a, f = max(0.0, float(a)), max(0.0, float(f))
    scaled = 0
    for key in base.keys("cpu"):
        if prof.get(key, "cpu") is None:
            m = base.get(key, "cpu")
            prof.add(key, "cpu", Measurement(a + f * m.seconds, m.repeats, a + f * m.min_s,
                                             a + f * m.max_s))
            scaled += 1
    for key, w in base.work.items():
        prof.work.setdefault(key, w)
    return prof, (a, f), scaled


# -- the whole calibration ----------------------------------------------------------------------
def with_factor(model, profile: Profile, k: float) -> tuple:
    """(model, profile) with host costs and task times multiplied by k."""
    prof = Profile(meta=dict(profile.meta, iteration_factor=k))
    for (key, kind), m in profile.times.items():
        prof.add(key, kind, Measurement(m.seconds * k, m.repeats, m.min_s * k, m.max_s * k))
    prof.work.update(profile.work)
    costs = {kind: HostCost(c.seconds * k, c.per_byte * k) for kind, c in model.host_costs.items()}
    record = dict(model.calibration)
    record["from_traces"] = dict(record.get("from_traces", {}), iteration_factor=k)
    return model.with_host_costs(costs, record), prof


def calibrate(paths, base_model, base_profile: Profile | None = None, factor: bool = True):
    """(machine model with host costs, in-situ profile, Fit) from trace files. `base_model`
    is a MachineModel with one device per rank of the runs (or one per device): its devices
    and links are kept, its host costs replaced. `factor`: fit the iteration factor."""
    runs = load_runs(paths)
    if not runs:
        raise CalibrationError("calibrate: give at least one trace file (a run with --trace)")
    ranks, per_rank = runs[0].ranks, runs[0].per_rank
    try:
        layout = model_for_layout(base_model, ranks, per_rank)
    except ReplayError as e:
        raise CalibrationError(f"calibrate: {e}") from None
    profile, scale, scaled = insitu_profile(runs, base_profile)
    plain = NodeTimer(layout, CostModel(profile))       # device phases without host costs
    samples: dict = {}
    for r in runs:
        for kind, rows in host_samples(r, lambda n: plain.timing(n)[0]).items():
            samples.setdefault(kind, []).extend(rows)
    host_costs, counts, spread = fit_host_costs(samples, waits=ranks > 1)
    record = dict(base_model.calibration)
    record["from_traces"] = {"traces": [r.path for r in runs], "layout": [ranks, per_rank],
                             "events": counts}
    model = base_model.with_host_costs(host_costs, record)
    fit = Fit(host_costs, counts, spread, len(profile.keys("cpu")) - scaled, scaled, scale)
    fit.residuals = residuals(runs, model, profile)
    fit.unscaled = (model, profile)
    if factor:
        k = 1.0
        for _ in range(2):                  # the simulation is nearly linear in k
            k *= statistics.median(m / p for _, m, p in fit.residuals if p > 0)
            model, profile = with_factor(*fit.unscaled, k)
            fit.residuals = residuals(runs, model, profile)
        fit.factor = k
    return model, profile, fit


def residuals(runs, model, profile: Profile) -> list:
    """(run name, measured s, predicted s) of every recorded run simulated on model."""
    out = []
    for r in runs:
        costs = CostModel(profile, int_ranges=r.int_ranges)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CostWarning)
            res = simulate(r.graph, model_for_layout(model, r.ranks, r.per_rank), costs)
        name = f"{r.app} {' '.join(a for a in r.argv if a != '--small')}"[:44]
        out.append((name, r.measured_s, res.makespan if res.valid else res.span))
    return out
