"""Calibration from recorded runs: a machine model with host costs and a profile of in-situ
task times, fitted to the `--trace` files of real runs (`python -m strategy calibrate`).

What a trace determines (docs/simulator.md):
  task times    per cost key, the median (and min, max) of its task events in the runs: the
                task's work inside an iteration (slower than alone in the profiler: its
                inputs come from other tasks, not warm in cache). The median, not the mean:
                on a shared machine a few events of an iteration are preempted (0.4 ms
                steps that took 4-9 ms at a load of 7 on 2 cores), and which keys they land
                on is chance; with one traced iteration a mean prices a key 3x too high when
                one of its few events was hit. With a base profile (the profiler's times,
                alone, its fastest repeat: insitu.alone_s), the keys the runs did not see get
                the profiler's time scaled by the fitted line in-situ = a + f * alone, so a
                strategy never run is costed alike;
  contention    the preemptions themselves, as wall seconds per second of work: the task
                events' total over their keys' medians (contention()), or the load the OS
                counted over each traced iteration, which the trace records per rank
                (recorded_load; or `loads` from the caller): then the keys long beside a
                slice, preempted in every event, get events / load as work
                (deflate_long_keys). The OS takes the core at random moments in slices
                (slice_length), so a thread pays it in proportion to the time it works, and
                ranks that exchange data stall each other: predict() simulates that
                (strategy/preemption.py); the files written hold task times and host costs
                times the contention (the smooth version, for the search);
  host costs    per node kind (simulator.py's host model; strategy/hostcosts.py): the
                executor's time between one event and the next on a rank (taking the
                next instruction, polling MPI, allocating) is the median gap before
                events of that kind (longer ones are waits for a message, which the
                simulator models itself, or preemptions, which contention counts); for
                nodes whose whole event is host work (send = pack + Isend, recv = unpack, an
                all-reduce's start = pack + Iallreduce) the event itself, fitted as
                seconds + per_byte * bytes; for local copies and reductions, what the event
                takes beyond the device model's memory time.
  ranks sharing cores  on several ranks, the share of its waits a waiting rank takes a
                core (its wake-ups: the ranks' CPU beyond their events) and the machine's
                other runnable threads (strategy/cores.py sharing: from each rank's load
                and its events' overlap with the others', runs at contention 1 bounding),
                so that predict() gives each rank the contention of the ranks working or
                waking beside it (a strategy whose ranks take turns is slowed less than one
                whose ranks all compute at once, by as much as the runs showed);
  gradient buckets  on several ranks, the executor fuses all-reduces into buckets, one
                MPI collective each, posted when the last member is ready; predict() does
                the same (strategy/gradbuckets.py), and the collective's wait beyond its
                links is measured from the traces (post to every member rank's first use:
                8-21 ms for 4 ranks of 2 cores asleep between polls, where the machine
                model's all-reduce takes 0.1-0.5 ms), a line in log2(1 + KiB) of the
                bucket's bytes per number of ranks taking part;
  ranks' speeds  on several ranks, how fast each rank ran its tasks beside the others in
                one recorded iteration (insitu.rank_speeds: 6.7 and 10.4 ms for the same
                50 tasks of RNNLM data parallel on 2 ranks at a load of 1.00); predict()
                draws a recorded iteration's speeds per simulation (preemption.py), so
                coupled ranks wait for the slower, as the runs did;
  the iteration factor  what the recorded runs still take beyond the simulation of
                them with the above (the median of measured / predicted over the runs,
                refined once; measured is a run's untraced period where its trace keeps
                one, else its traced iteration: residuals()), applied to task times and
                host costs. On several ranks it stands for what the model of ranks leaves
                out (MPI progress and polling, wake-ups, ranks sharing cores); 1.25-1.42 on
                2 ranks and 2.44-2.66 on 4 ranks of 2 cores at 12:09, 1.13-1.47 on a quiet
                machine (2026-12-05). One process fits one only where every trace keeps an
                untraced period: its one thread runs every node, so its traced iteration is
                its work times the contention, and a factor fitted to the traced iteration
                held only the calibrating runs' noise (1.06-1.17; held out, 1 process x 4
                devices 15.3% median error with it, 6.8% without); fitted to the untraced
                periods it holds what the traced iteration, whose keys price the work, is
                not (docs/simulator.md, 2026-12-05 23:00). `factor=False` (--no-factor)
                leaves it out.
  views re-sliced  on one process, the executor's time inside a task's event slicing the
                views of the buffers it gives new storage (strategy/reslicing.py: every
                rect of a region a device uses other than its buffer's whole, 4-6 us each,
                paid at the buffer's first user every iteration): a view's cost fitted from a
                key's events at different counts, taken out of each event before its key is
                priced and put back per node by predict() (an `add` part took 9-11 us in
                data parallel's events and 36-52 us in parameter parallel's, whose buffers
                have 6-8 views: one price held neither);
  untraced runs  predict() prices a run without --trace by default, whose executor skips
                the idle points a traced run times (strategy/untraced.py); the residuals,
                and so the iteration factor, compare a run's untraced period (an app's
                --trace run times its iterations before the traced last one: the trace
                keeps their period, taskrt.trace.UNTRACED_PERIOD) with the untraced
                prediction, and a trace without one (a run of one timed iteration, or an
                older trace) its traced iteration with the traced prediction.
What it does not: link latency and bandwidth (a message's arrival is seen only when the
receiving thread next polls, so the traces bound them loosely) and the end of an all-reduce
(no event marks it); those stay the base machine's (calibrate_local's ping-pongs and
all-reduce fit), and the residuals show what they leave.

All traces of one calibration must share one layout (ranks x devices per rank): 1 process
runs taskrt's LocalExecutor, several run the MPIExecutor, whose costs differ. Its error:
Fit.error on its own runs, Fit.heldout on strategies held out of it (strategy/heldout.py:
k-fold refits), the margin of a search it judges (apps/judge.py).
"""
from __future__ import annotations

import dataclasses
import math
import statistics
import warnings
from dataclasses import dataclass, field

from taskrt.trace import LOAD_EVENT, UNTRACED_PERIOD, contention_of

from .costs import CostModel, CostWarning, Profile
from .costs.profile import Measurement
from .hostcosts import fit_host_costs, host_samples
from .insitu import (contention, deflate_long_keys, insitu_profile, rank_speeds,
                     run_durations, slice_length)
from .machines import HOST_KINDS, HostCost
from .cores import machine_cores, per_thread_contention, sharing, waiting_slice
from .gradbuckets import bucket_collectives, bucketed, buckets_of, collective_wait
from .heldout import HeldOut, estimate as heldout_estimate, kept, residual_error  # noqa: F401
from .heldout import case_name, residual_lines
from .heldout import RECORD as HELDOUT_RECORD, from_record as heldout_of, to_record
from .preemption import PreemptedTimer, expected_makespan
from .replay import ReplayError, measured_times, model_for_layout, recorded
from .rankclocks import on_one_clock
from .repetition import from_record, priced_at_repetition, same_graph, thread_scale
from .reslicing import reslicing_time, resliced_views
from .simulator import NodeTimer, simulate
from .speedref import at_reference_speed, trace_reference
from .untraced import UntracedCosts, batch_tails, skipped_tasks
from .wakeups import ROUNDS as WAKE_ROUNDS, SleepSchedule, traced_schedule, wake_delays


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
    load: float | None = None       # the OS's load over the traced iteration (recorded_load)
    executor_s: dict = field(default_factory=dict)  # node id -> s of its event not its key's
    task_scale: dict = field(default_factory=dict)  # node id -> x of its rank's repetition
    reference_s: float | None = None  # the machine's speed beside the run (speedref.py)
    untraced_s: float | None = None   # the run's untraced period before its traced iteration


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
    ranks: int = 1                  # the recorded runs' ranks
    contention: float = 1.0         # wall seconds per second of work (contention())
    work: tuple | None = None       # (model, profile) before contention: the threads' work
    slice_s: float = 0.0            # the OS's time slice as the runs felt it (slice_length)
    load_source: str = "the task events"   # where the contention came from
    background: float | None = None  # other runnable threads sharing the cores (cores.py)
    waiting: float = 0.0             # share of its waits a waiting rank takes a core (cores.py)
    cores: int = 1                   # the cores the recorded runs' ranks shared
    sleep: SleepSchedule | None = None  # how an idle rank waits (several ranks; wakeups.py)
    collective_s: dict | None = None    # {ranks: s} a bucket's wait beyond links (gradbuckets)
    speeds: list | None = None      # per recorded iteration, its ranks' relative speeds
    view_s: float = 0.0             # one process: s per view a node re-slices (reslicing.py)
    reference_s: float | None = None  # the speed reference its times are at (speedref.py)
    repetition: tuple = (0.0, 1.0)  # (b, ref): task x (rank's repetition / ref)^b (repetition.py)
    error: float = 0.0              # median |predicted / measured - 1| of its residuals
    heldout: HeldOut | None = None  # its error on strategies held out of it (heldout.py)

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
        how = ("the task events' time over their keys' medians"
               if self.load_source == "the task events" else
               f"{self.load_source}: (CPU + run-queue wait) / CPU")
        lines.append(f"contention {self.contention:.3f} (wall seconds per second of work, "
                     f"from {how}); preemption slices {self.slice_s * 1e3:.2f} ms")
        if self.background is not None:
            lines.append(f"ranks sharing {self.cores} cores with {self.background:.2f} others, "
                         f"waiting ranks on a core {self.waiting:.2f} of their waits (cores.py)")
        elif self.ranks > 1:    # shared_cores off, or sharing() found no load records
            lines.append("one contention for every rank: no per-rank sharing fitted")
        if self.sleep is not None:
            sl = self.sleep
            lines.append(f"idle ranks yield {sl.spin_s * 1e3:.1f} ms, then sleep "
                         f"{sl.first_s * 1e6:.0f} us doubling to {sl.max_s * 1e6:.0f} us "
                         f"(+{sl.overshoot_s * 1e6:.0f} us each): messages to a sleeping "
                         "rank wait for its wake-up (strategy/wakeups.py)")
        if self.collective_s:
            waits = ", ".join(f"{p} ranks {a * 1e3:.2f} + {f * 1e3:.2f} ms x log2(1 + KiB)"
                              for p, (a, f) in self.collective_s.items())
            lines.append(f"a gradient bucket's collective beyond its links: {waits} (from "
                         "its last start to every member rank's first use; "
                         "strategy/gradbuckets.py)")
        if self.speeds:
            apart = statistics.median(max(t) / min(t) for t in self.speeds)
            lines.append(f"the ranks of one iteration ran their tasks {apart:.2f}x apart "
                         f"(median of {len(self.speeds)} recorded iterations; the "
                         "prediction draws them: strategy/preemption.py)")
        if self.view_s:
            lines.append(f"the executor re-slices a buffer's views at its first user: "
                         f"{self.view_s * 1e6:.2f} us a view (strategy/reslicing.py)")
        if self.reference_s is not None:
            lines.append(f"times at the machine's speed reference {self.reference_s * 1e3:.3f} "
                         "ms (each trace's events scaled to it from its own; a prediction "
                         "given a run's reference is scaled to that: strategy/speedref.py)")
        if self.factor != 1.0:
            lines.append(f"iteration factor {self.factor:.3f} (task times and host costs; "
                         "what the runs take beyond their simulation)")
        if self.residuals:
            lines.append("residuals (the recorded runs simulated with this calibration):")
            lines += residual_lines(self.residuals)
            errs = [abs(p - m) / m for _, m, p in self.residuals]
            lines.append(f"  median |error| {100 * statistics.median(errs):.1f}%, worst "
                         f"{100 * max(errs):.1f}%")
        return "\n".join(lines + (self.heldout.text() if self.heldout else []))


def load_runs(paths) -> list[RecordedRun]:
    """The recorded runs of trace files, graphs rebuilt and checked (strategy.replay), the
    events of several ranks on one clock (strategy/rankclocks.py)."""
    runs = []
    for path in paths:
        workload, argv, (ranks, per_rank, kind), built, graph, events, record = recorded(
            None, None, path)
        if kind != "cpu":
            raise CalibrationError(f"trace {path}: recorded on {kind} devices, whose events "
                                   "time the host's issue of each task, not its kernel; "
                                   "calibrate from CPU runs (profile GPUs with python -m "
                                   "strategy.costs profile --device cuda)")
        if ranks > 1:
            events = on_one_clock(graph, events)     # each rank stamps from its own start
        try:
            reference = trace_reference(events, path)
        except ValueError as e:
            raise CalibrationError(str(e)) from None
        runs.append(RecordedRun(str(path), workload.name, list(argv), ranks, per_rank, graph,
                                events, built.int_ranges, measured_times(events)[1],
                                recorded_load(events, ranks, path), reference_s=reference,
                                untraced_s=untraced_period(record, path)))
    layouts = {(r.ranks, r.per_rank) for r in runs}
    if len(layouts) > 1:
        raise CalibrationError("calibrate: the traces have different layouts (ranks x "
                               f"devices per rank: {sorted(layouts)}); calibrate each layout "
                               "on its own (one process and several ranks run different "
                               "executors)")
    return runs


def untraced_period(record: dict, path) -> float | None:
    """The untraced period a trace's run record keeps (taskrt.trace.UNTRACED_PERIOD: an
    app's --trace run times its iterations before the traced last one untraced), or None
    (a run of one timed iteration, or recorded before soapflow kept it)."""
    got = record.get(UNTRACED_PERIOD)
    if got is None:
        return None
    period = got.get("period_s") if isinstance(got, dict) else None
    if not isinstance(period, (int, float)) or isinstance(period, bool) or not period > 0 \
            or not math.isfinite(period):
        raise CalibrationError(f"trace {path}: its '{UNTRACED_PERIOD}' record is not a period "
                               f"in seconds > 0 ({got!r}); record the run again with --trace")
    return float(period)


def recorded_load(events: list, ranks: int, path) -> float | None:
    """The contention the OS imposed on the ranks over the traced iteration, from the
    trace's LOAD_EVENT records (taskrt.trace.LoadMeter; one per rank): (CPU + run-queue
    wait) / CPU summed over the ranks. None for a trace without them (recorded before
    soapflow recorded them, or on an OS without /proc/thread-self/schedstat)."""
    records = {}
    for e in events:
        if e.get("ph") != "M" or e.get("name") != LOAD_EVENT:
            continue
        args = e.get("args")
        fields = ("cpu_s", "wait_s")
        if not isinstance(args, dict) or any(
                args.get(k) is not None and (not isinstance(args.get(k), (int, float))
                                             or isinstance(args.get(k), bool)
                                             or not args[k] >= 0) for k in fields):
            raise CalibrationError(f"trace {path}: its '{LOAD_EVENT}' record of rank "
                                   f"{e.get('pid', 0)} is not seconds >= 0 ({args!r}); "
                                   "record the run again with --trace")
        records[e.get("pid", 0)] = args
    if len(records) != ranks:
        return None
    return contention_of(records.values())


# -- the whole calibration ----------------------------------------------------------------------
def with_factor(model, profile: Profile, k: float, name: str = "iteration_factor") -> tuple:
    """(model, profile) with host costs and task times multiplied by k (recorded as
    `name` in the profile's meta and the model's calibration record)."""
    prof = Profile(meta=dict(profile.meta, **{name: k}))
    for (key, kind), m in profile.times.items():
        prof.add(key, kind, Measurement(m.seconds * k, m.repeats, m.min_s * k, m.max_s * k))
    prof.work.update(profile.work)
    costs = {kind: HostCost(c.seconds * k, c.per_byte * k) for kind, c in model.host_costs.items()}
    record = dict(model.calibration)
    record["from_traces"] = dict(record.get("from_traces", {}), **{name: k})
    return model.with_host_costs(costs, record), prof


def calibrate(paths, base_model, base_profile: Profile | None = None, factor: bool = True,
              loads: dict | None = None, shared_cores: bool = True, wakeups: bool = True,
              rank_spread: bool = True, speed_reference: bool = True, repeats: bool = True,
              heldout: bool = True):
    """(machine model with host costs, in-situ profile, Fit) from trace files. `base_model`
    is a MachineModel with one device per rank of the runs (or one per device): its devices
    and links are kept, its host costs replaced. `factor`: fit the iteration factor (runs
    of several ranks only).
    `loads`: {trace path: contention the OS counted while it ran}, instead of what the
    trace recorded over its iteration (recorded_load; traces of older runs have none).
    When every run has a load, it is used instead of the estimate from the task events
    (see deflate_long_keys). `shared_cores`: on several ranks, each rank the contention
    of the ranks working beside it and of other threads (cores.py, from the runs' load
    records), slices as long as the runs' messages waited (cores.waiting_slice); else one.
    `wakeups`: on several ranks, a message to a rank with nothing to run waits for its next
    wake-up (wakeups.py; the executor's sleep schedule for the runs' ranks, cores and the
    other processes' load they recorded). `rank_spread`: on several ranks, the ranks of one
    iteration run at the speeds the runs showed (insitu.rank_speeds), drawn in each simulation.
    `speed_reference`: where every trace records the machine's speed beside its run
    (strategy/speedref.py), fit every run at one speed (at_reference_speed; fit.reference_s).
    `repeats`: on several ranks, a rank's tasks at its repetition's speed (repetition.py).
    `heldout`: estimate its error on strategies it never saw (strategy/heldout.py: k-fold
    refits of this calibration without some graphs' traces), Fit.heldout."""
    runs = load_runs(paths)
    if not runs:
        raise CalibrationError("calibrate: give at least one trace file (a run with --trace)")
    options = dict(base_model=base_model, base_profile=base_profile, factor=factor,
                   loads=loads, shared_cores=shared_cores, wakeups=wakeups,
                   rank_spread=rank_spread, speed_reference=speed_reference, repeats=repeats)
    groups = same_graph(runs)                # each refit on copies: fitting sets their times
    held = heldout_estimate(groups, lambda rs: fit_runs(
        [dataclasses.replace(r) for r in rs], **options, last_residuals=False)[2],
        lambda fit, g: residuals(g, fit)[0]) \
        if heldout else HeldOut(None, len(groups), why="calibrated with heldout=False")
    return fit_runs(runs, **options, heldout=held)


def fit_runs(runs, base_model, base_profile, factor, loads, shared_cores, wakeups,
             rank_spread, speed_reference, repeats, heldout: HeldOut | None = None,
             last_residuals: bool = True):
    """calibrate() of loaded runs (which it changes: speeds, prices); `last_residuals`:
    the residuals at the fitted factor (Fit.error), which a held-out refit goes without."""
    reference = at_reference_speed(runs) if speed_reference else None
    ranks, per_rank = runs[0].ranks, runs[0].per_rank
    try:
        layout = model_for_layout(base_model, ranks, per_rank)
    except ReplayError as e:
        raise CalibrationError(f"calibrate: {e}") from None
    view_s = reslicing_time(runs) if ranks == 1 else 0.0  # before the keys are priced
    repeated = priced_at_repetition(runs, repeats and ranks > 1)
    profile, scale, scaled = insitu_profile(runs, base_profile)
    plain = NodeTimer(layout, CostModel(profile))       # device phases without host costs
    samples: dict = {}
    for r in runs:
        for kind, rows in host_samples(r, lambda n: plain.timing(n)[0]).items():
            samples.setdefault(kind, []).extend(rows)
    host_costs, counts, spread = fit_host_costs(samples)
    record = dict(base_model.calibration)
    record["from_traces"] = {"traces": [r.path for r in runs], "layout": [ranks, per_rank],
                             "events": counts}
    model = base_model.with_host_costs(host_costs, record)
    fit = Fit(host_costs, counts, spread, len(profile.keys("cpu")) - scaled, scaled, scale)
    durations = run_durations(runs)
    fit.contention, fit.slice_s = contention(durations, profile), slice_length(durations, profile)
    given = loads or {}
    loads = {r.path: given.get(r.path) or r.load for r in runs}
    if all(loads.values()):     # the ranks' sharing of the cores is cores.py's (in_events)
        fit.contention = deflate_long_keys(runs, profile, base_profile, fit.slice_s, loads,
                                           machine_cores() if shared_cores else None)
        fit.load_source = "the OS's count" + ("" if any(given.get(r.path) for r in runs)
                                              else " recorded in the traces")
    fit.ranks, fit.view_s, fit.reference_s, fit.repetition = ranks, view_s, reference, repeated
    if shared_cores and ranks > 1:
        fit.cores = machine_cores()
        shared = sharing(runs, fit.cores)
        if shared is not None:
            fit.background, fit.waiting = shared
        fit.slice_s = waiting_slice(runs, fit.cores, fit.slice_s)
    if wakeups and ranks > 1:
        fit.cores = machine_cores()
        try:
            fit.sleep = traced_schedule(runs, ranks, fit.cores)
        except ValueError as e:          # (a trace's schedule record: wakeups._schedule_of)
            raise CalibrationError(str(e)) from None
        fit.collective_s = collective_wait(runs, lambda nodes: sum(plain.timing(n)[0]
                                                                   for n in nodes))
    fit.work = (model, profile)
    if rank_spread and ranks > 1:
        fit.speeds = rank_speeds(runs, profile) or None
    # One process fits one only from untraced periods: its traced iteration is its work x
    # contention, and a factor fitted to it held the runs' noise (module doc)
    fitted = factor and (ranks > 1 or all(r.untraced_s is not None for r in runs))
    if fitted or last_residuals:
        fit.residuals = residuals(runs, fit)
    fit.unscaled = with_factor(model, profile, fit.contention, "contention")
    for last in (False, True) if fitted else ():    # the simulation is nearly linear in k
        fit.factor *= statistics.median(m / p for _, m, p in fit.residuals if p > 0)
        if last_residuals or not last:
            fit.residuals = residuals(runs, fit)
    fit.error, fit.heldout = residual_error(fit.residuals), heldout
    model, profile = at_contention(fit, fit.contention)
    record = dict(model.calibration)
    record["from_traces"] = dict(record["from_traces"], contention=fit.contention,
                                 slice_s=fit.slice_s, iteration_factor=fit.factor,
                                 **{PREDICTION_RECORD: prediction_record(fit)})
    return model.with_host_costs(model.host_costs, record), profile, fit


PREDICTION_RECORD = "prediction"    # in the calibration record's "from_traces"


def prediction_record(fit: Fit) -> dict:
    """What predict() needs of a fit beyond the host costs and task times of the files
    calibrate() writes (plain JSON): the machine file's calibration record keeps it, so that
    whoever holds the two files can predict as the calibration does (fit_from_files)."""
    return {"ranks": fit.ranks, "contention": fit.contention, "factor": fit.factor,
            "slice_s": fit.slice_s, "background": fit.background, "waiting": fit.waiting,
            "cores": fit.cores,
            "sleep": None if fit.sleep is None else dataclasses.asdict(fit.sleep),
            "collective_s": None if fit.collective_s is None else
            {str(p): list(line) for p, line in fit.collective_s.items()},
            "speeds": None if fit.speeds is None else [list(t) for t in fit.speeds],
            "view_s": fit.view_s, "reference_s": fit.reference_s, "error": fit.error,
            "repetition": list(fit.repetition), HELDOUT_RECORD: to_record(fit.heldout)}


def fit_from_files(model, profile: Profile, where: str = "the machine file") -> Fit | None:
    """The Fit of calibrate() from the two files it wrote (the model and profile, which hold
    host costs and task times times contention x factor, and the model's calibration record:
    prediction_record), for predict(); None when the record holds no prediction (a preset,
    `local`, a file written before 2026-12-04 22:30). A profile of another calibration (its
    scale is not the record's) is refused: its task times are not the fit's."""
    rec = (model.calibration.get("from_traces") or {}).get(PREDICTION_RECORD)
    if rec is None:
        return None
    try:
        error = rec.get("error", 0.0)           # 0: a record before 2026-12-06
        if type(error) not in (int, float) or not 0.0 <= error < float("inf"):
            raise ValueError(f"error {error!r} is not a relative error >= 0")
        scale = float(rec["contention"]) * float(rec["factor"])
        sleep = None if rec["sleep"] is None else SleepSchedule(**rec["sleep"])
        collective = None if rec["collective_s"] is None else {
            int(p): (float(a), float(f)) for p, (a, f) in rec["collective_s"].items()}
        speeds = None if rec["speeds"] is None else [tuple(float(x) for x in t)
                                                     for t in rec["speeds"]]
        fit = Fit(dict(model.host_costs), {}, {}, 0, ranks=int(rec["ranks"]),
                  contention=float(rec["contention"]), factor=float(rec["factor"]),
                  slice_s=float(rec["slice_s"]), background=rec["background"],
                  waiting=float(rec["waiting"]), cores=int(rec["cores"]), sleep=sleep,
                  collective_s=collective, speeds=speeds,
                  view_s=float(rec.get("view_s", 0.0)),   # 0: a record before 2026-12-05
                  reference_s=None if rec.get("reference_s") is None else
                  float(rec["reference_s"]),
                  error=float(error), repetition=from_record(rec.get("repetition", (0, 1))),
                  heldout=heldout_of(rec))      # None: a record before 2026-12-07
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CalibrationError(f"{where}: its calibration record's {PREDICTION_RECORD!r} is "
                               f"malformed ({type(e).__name__}: {e}); calibrate again "
                               "(python -m strategy calibrate)") from None
    if not scale > 0 or profile.meta.get("contention") != scale:
        raise CalibrationError(
            f"{where}: the profile is not the one its calibration wrote (task times scaled "
            f"by {profile.meta.get('contention')!r}, the calibration's contention x factor is "
            f"{scale!r}): give the NAME.profile written with it")
    fit.work = with_factor(model, profile, 1.0 / scale, "work")
    fit.host_costs = dict(fit.work[0].host_costs)
    return fit


def judged(fit: Fit, graphs: dict, int_ranges: dict, ranks: int, per_rank: int) -> list:
    """[(predicted s, name)] of {name: graph} by predict(), fastest first (ties in the order
    given): a search's candidates judged by the whole calibrated model, which a search's
    own simulator (the smooth model of the files) is not."""
    times = [(predict(fit, g, int_ranges, ranks, per_rank), k, name)
             for k, (name, g) in enumerate(graphs.items())]
    return [(t, name) for t, _, name in sorted(times)]


def predict(fit: Fit, graph, int_ranges: dict, ranks: int, per_rank: int,
            contention: float | None = None, factor: float | None = None,
            wakeups: bool = True, traced: bool = False,
            reference_s: float | None = None) -> float:
    """A calibration's prediction of an iteration of `graph` run on `ranks` x `per_rank`
    devices: the threads' work (times the iteration factor) under preemption at the
    contention (default: the recorded runs'; on several ranks with a fitted background,
    each rank's from its overlap with the others, strategy/cores.py),
    strategy/preemption.py; one process pays it in proportion to its work (the smooth
    limit, exact in expectation there). On several ranks a message that reaches a rank
    with nothing to run waits for its next wake-up (fit.sleep, strategy/wakeups.py;
    `wakeups=False`: not, e.g. for the threads' work alone), and each simulation draws the
    ranks' speeds of one recorded iteration (fit.speeds). `traced`: an iteration run with
    --trace (every node timed alone); else as run without, whose executor skips the idle
    points and batches the updates ready together (strategy/untraced.py). `reference_s`: the
    machine's speed reference beside the run predicted (strategy/speedref.py): task times
    and host costs are scaled by it over the fit's (not the OS's slices and wake-ups);
    refused for a fit without one."""
    k = fit.factor if factor is None else factor
    if reference_s is not None:
        if fit.reference_s is None:
            raise CalibrationError("predict: a run's speed reference was given, but the "
                                   "calibrating traces recorded none (strategy/speedref.py)")
        if not reference_s > 0:
            raise CalibrationError(f"predict: reference_s must be positive seconds, got "
                                   f"{reference_s!r}")
        k *= reference_s / fit.reference_s
    model, profile = with_factor(*fit.work, k) if k != 1.0 else fit.work
    extra = None
    if fit.view_s and ranks == 1:          # the views its executor re-slices (reslicing.py)
        extra = {i: fit.view_s * n for i, n in resliced_views(graph).items()}
    buckets = buckets_of(graph) if ranks > 1 else ()
    costs = UntracedCosts(profile, int_ranges=int_ranges,
                          skipped=frozenset() if traced else skipped_tasks(graph),
                          batched=frozenset() if traced else batch_tails(graph, buckets),
                          executor_s=extra)
    layout = model_for_layout(model, ranks, per_rank)
    scale = thread_scale(graph, per_rank, *fit.repetition, NodeTimer(layout, costs).host) \
        if ranks > 1 else {}
    held = None
    if ranks > 1:                           # the executor's buckets: one collective each
        if any(len(b) > 1 for b in buckets) and not NodeTimer(layout, costs).ready_order:
            raise CalibrationError(
                "predict: a model of several ranks without host costs cannot hold the MPI "
                "executor's gradient buckets (its nodes are scheduled in program order); "
                "use the model a calibration from traces of several ranks returned")
        graph = bucketed(graph, buckets)
        if wakeups and fit.collective_s is not None:
            held = bucket_collectives(graph, buckets, fit.collective_s)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CostWarning)
        if contention is None and fit.background is not None and ranks > 1:
            c = per_thread_contention(graph, layout, costs, fit.background, fit.cores,
                                      waiting=fit.waiting)
        else:
            c = fit.contention if contention is None else contention
        delays = None
        if wakeups and fit.sleep is not None and ranks > 1:
            delays = {}
            for _ in range(WAKE_ROUNDS):
                timer = PreemptedTimer(layout, costs, c, 0.0, delays=delays, collectives=held,
                                       speed=scale)
                delays = wake_delays(graph, simulate(graph, layout, costs, timer), timer,
                                     fit.sleep)
        return expected_makespan(graph, layout, costs, c, fit.slice_s if ranks > 1 else 0.0,
                                 delays=delays, collectives=held,
                                 speeds=fit.speeds if ranks > 1 else None, scale=scale)


def at_contention(fit: Fit, c: float) -> tuple:
    """(model, profile) of a calibration for a machine whose contention is c (wall seconds
    per second of work) instead of the recorded runs', the iteration factor kept."""
    return with_factor(*fit.work, c * fit.factor, "contention")


def residuals(runs, fit: Fit) -> list:
    """(case name, measured s, predicted s) of every recorded graph predicted by the fit;
    measured is the median of its runs' untraced periods where each run has one (the
    iterations an app's --trace run times before its traced last one: what predict()
    predicts by default), else of its traced iterations, predicted as traced. One traced
    iteration is one sample of a noisy machine (on 2 shared cores at a load of 4-11, 15.8%
    from its case's median of 9 timed iterations, median over 98 cases): fitting the
    iteration factor to single iterations fits their noise. A traced iteration also times
    every node alone (the updates an untraced run batches), which the untraced periods
    leave out."""
    out = []
    for group in same_graph(runs):
        r = group[0]
        name = case_name(r.app, r.argv, len(group))
        untraced = all(g.untraced_s is not None for g in group)
        measured = statistics.median(g.untraced_s if untraced else g.measured_s
                                     for g in group)
        out.append((name, measured, predict(fit, r.graph, r.int_ranges, r.ranks, r.per_rank,
                                            traced=not untraced)))
    return out
