"""Simulator accuracy: predicted vs measured iteration time of real training runs, with the
simulator calibrated on some strategies and asked about others it never saw.

Apps at --small, 8 samples per device, x seven strategies (data, parameter, attribute and
operation parallel, two random ones: strategy/standard.py, and the best of a seeded MCMC
search of 200 proposals on the uncalibrated local model with analytic costs, as a user
without a calibration would search) x four layouts: one process driving 2 or 4 logical
devices (--devices-per-rank, taskrt's LocalExecutor) and `mpirun -np 2` or `-np 4` with one
device per rank (the MPIExecutor). AlexNet, Inception-v3, RNNLM and the Transformer on 2
devices; on 4 all but Inception-v3 (2 s an iteration here; 4 ranks on 2 cores would take
most of the benchmark's time).

- measured (collected by bench/_sim_accuracy_runs.py): the apps themselves train with
  --strategy FILE, untraced, run by a worker (a plain process for 1 rank, mpirun for
  several), which also calibrates the local machine model (calibrate_local: device speeds,
  ping-pongs, all-reduce) for its layout. Each case runs REPEATS times (ITERATIONS
  iterations after a warm-up each, 3 before 2026-12-06); measured is the median of the
  runs' periods (each run's timed iterations barrier to barrier, over their number:
  apps/report.py Result.period_s), the spread the lowest and highest of them (run to
  run); collections before 2026-12-05 08:30 have no periods: there the median of the
  runs' median iteration times and its spread (measurement()).
  Taking turns with them, each case runs TRACES times with --trace (the same warm-up and
  timed iterations untraced, then one traced iteration; the trace keeps the untraced
  ones' period), so that traces and timings see the same loads on a shared machine and a
  calibration fits each strategy's median period. Each run also records the
  load the job felt (contention_since: (CPU + run-queue wait) / CPU from
  /proc/self/schedstat, every rank);
- calibrated (cross-validated): the strategies are split in two folds; the traces of one
  fold (every app) calibrate the layout's model (strategy/calibration.py: host costs per
  node kind, in-situ task times, contention and preemption slices, the profiler's times
  scaled to in situ for keys not seen, the ranks' speeds in one iteration, the iteration
  factor) and predict the strategies of
  the other fold, which it never saw (calibration.predict);
- at the measured load: the same, at the contention the OS counted during the case's own
  runs (the calibration's is what it counted during the calibrating traces' iterations,
  which the traces record); measured, not fitted: what is left is the model's error;
- with the speed reference: the same, each fold's traces put at one speed of the machine
  and each case predicted at the speed of its own timed runs (strategy/speedref.py: a fixed
  torch kernel mix timed beside every run on every rank); collections before 2026-12-05
  05:30 have no reference timings, and this is left out;
- without the iteration factor; uncalibrated: the same graphs on calibrate_local's model
  with the profiler's times (one torch thread, every graph's distinct task nodes), as before
  calibration existed.

Reported: median and worst relative error, per app and layout every case (predicted /
measured (spread), error), and the ordering of every pair of strategies of one app and
layout whose measured medians differ by more than the sum of their spreads; the searched
strategy against data parallel, and as a search on a calibrated machine keeps one of them
(apps/judge.py: the calibration of the fold holding data parallel predicts both, the faster
is kept unless by less than the calibration's held-out estimate: `judged_data_s` and
`judged_error` of the searched case) and how the kept one ran, each calibration's held-out
estimate beside its error on the other fold (bench/_sim_accuracy_judged.py); each case's traced
iterations over its measured period (what tracing costs: bench/_sim_accuracy_traced.py);
`results["cases"]` lists every case. With SIM_ACCURACY_DATA=FOLDER the strategies, traces
and measurements are kept there (an interrupted collection resumes layout by layout), and a
folder holding a finished collection is analysed again without running anything.
"""
from __future__ import annotations

import json
import os
import statistics
import tempfile
import time

from bench._sim_accuracy_runs import (STRATEGIES, app_argv, apps_of_devices, collect,
                                      layouts, trace_files)
from bench._sim_accuracy_judged import heldout_rows, judged_rows, searched_vs_data
from bench._sim_accuracy_traced import traced_rows, traced_span

FOLDS = (("data", "attribute", "random0"), ("parameter", "operation", "random1", "searched"))
DATA_ENV = "SIM_ACCURACY_DATA"    # a folder: keep the collected runs there, or reuse them


# -- statistics (pure) --------------------------------------------------------------------
def relative_errors(predicted, measured) -> list[float]:
    """|predicted - measured| / measured per case."""
    if len(predicted) != len(measured):
        raise ValueError(f"relative_errors: {len(predicted)} predictions for "
                         f"{len(measured)} measurements")
    bad = [m for m in measured if not m > 0]
    if bad:
        raise ValueError(f"relative_errors: measured times must be positive, got {bad}")
    return [abs(p - m) / m for p, m in zip(predicted, measured)]


def ranks(values) -> list[float]:
    """Ranks 1..n of the values, ties given their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(xs, ys) -> float:
    """Spearman's rank correlation (Pearson's on ranks; nan when either side is constant)."""
    if len(xs) != len(ys) or len(xs) < 2:
        raise ValueError(f"spearman: need two equally long lists of at least 2 values, got "
                         f"{len(xs)} and {len(ys)}")
    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    return sxy / (sxx * syy) ** 0.5 if sxx and syy else float("nan")


def summary(cases: list[dict]) -> dict:
    """Median and worst relative error and Spearman correlation of a list of cases."""
    p = [c["predicted_s"] for c in cases]
    m = [c["measured_s"] for c in cases]
    err = relative_errors(p, m)
    return {"cases": len(cases), "median_error": statistics.median(err), "worst_error": max(err),
            "spearman": spearman(p, m) if len(cases) > 1 else float("nan")}


# -- prediction --------------------------------------------------------------------------
def graphs(app_name: str, devices: int, machine_model, folder: str
           ) -> tuple[dict, object]:
    """{strategy: TaskGraph} of the app's strategy files in folder on the machine model's
    taskrt machine, and the network (for its int ranges)."""
    from parallel_ops.lowering import lower
    from strategy import files
    from strategy.costs.app_profile import load_app
    from taskrt import plan
    net = load_app(app_name, app_argv(devices), devices)
    opt = net.optimizer
    machine = machine_model.taskrt_machine()
    out = {}
    for name in STRATEGIES:
        s = files.load(os.path.join(folder, f"{app_name}_{name}.json"), net.model, machine)
        lowered = lower(net.model, s, machine, opt)
        out[name] = plan(lowered.launches, machine, initial=lowered.initial)
    return out, net


def measure_profile(app_graphs: dict, int_ranges: dict, repeats: int, warmup: int):
    """A profile of every distinct task node of the graphs, one torch thread."""
    import torch
    from strategy.costs.profiler import distinct_nodes, profile_nodes
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return profile_nodes(distinct_nodes(list(app_graphs.values())), "cpu", repeats, warmup,
                             int_ranges)
    finally:
        torch.set_num_threads(threads)


def spread(runs) -> tuple[float, float]:
    """A case's spread: with repeated runs, the lowest and highest of their median iteration
    times (run to run); with one run, the 25th and 75th percentile of its iterations."""
    if len(runs) > 1:
        medians = [statistics.median(t) for t in runs]
        return min(medians), max(medians)
    times = runs[0]
    q = statistics.quantiles(times, n=4, method="inclusive") if len(times) > 1 else \
        [times[0]] * 3
    return q[0], q[2]


def measurement(case: dict) -> tuple[float, tuple[float, float]]:
    """A case's measured iteration time and spread: where its runs recorded their periods
    (barrier to barrier over the timed iterations: apps/report.py Result.period_s;
    collections from 2026-12-05 08:30 on), the median of the periods and their lowest and
    highest (one run: spread() of its iterations); before, the median of the runs' median
    iteration times and spread()."""
    periods = case.get("periods_s")
    if not periods:
        return case["measured_s"], spread(case["runs_s"])
    if len(periods) == 1:
        return periods[0], spread(case["runs_s"])
    return statistics.median(periods), (min(periods), max(periods))


def ordered_pairs(cases: list[dict]) -> tuple[int, int, list]:
    """(pairs clearly separated, of them ordered right by the prediction, the wrong ones):
    pairs of strategies of one app and layout whose measured medians differ by more than
    the sum of their spreads (spread())."""
    groups: dict = {}
    for c in cases:
        groups.setdefault((c["app"], c["layout"]), []).append(c)
    total, right, wrong = 0, 0, []
    for cs in groups.values():
        for i, a in enumerate(cs):
            for b in cs[i + 1:]:
                width = (a["spread_s"][1] - a["spread_s"][0]) + (b["spread_s"][1] -
                                                                 b["spread_s"][0])
                if abs(a["measured_s"] - b["measured_s"]) <= width:
                    continue
                total += 1
                if (a["measured_s"] < b["measured_s"]) == (a["predicted_s"] < b["predicted_s"]):
                    right += 1
                else:
                    wrong.append(f"{a['app']} {a['layout']} {a['strategy']}/{b['strategy']}")
    return total, right, wrong


def run(quick: bool = False) -> dict:
    """Collect (or, with SIM_ACCURACY_DATA=FOLDER holding an earlier collection, reuse) the
    measured runs and traces, then calibrate and predict."""
    keep = os.environ.get(DATA_ENV)
    if keep and os.path.exists(os.path.join(keep, "measured.json")):
        with open(os.path.join(keep, "measured.json")) as f:
            data = json.load(f)
        return analyse(keep, data)
    if keep:
        os.makedirs(keep, exist_ok=True)
        return analyse(keep, collect(keep, quick))
    with tempfile.TemporaryDirectory(prefix="simacc-") as folder:
        return analyse(folder, collect(folder, quick))


def analyse(folder: str, data: dict) -> dict:
    """Calibrate each layout on one fold of its traces, predict the other fold's cases."""
    import warnings
    from strategy.calibration import calibrate, judged, predict
    from strategy.heldout import margin
    from strategy.costs import CostModel, CostWarning
    from strategy.costs.profile import Profile, merged
    from strategy.logical_devices import shared as shared_devices
    from strategy.machines.fileformat import from_dict
    from strategy.simulator import simulate
    warnings.simplefilter("ignore", CostWarning)
    quick, measured = data["quick"], data["measured"]
    done = [lay for lay in layouts(quick) if f"{lay[0]}x{lay[1]}" in measured]
    timing = dict(data["timing"])
    t0 = time.perf_counter()
    cases, residuals, contention_fits, estimates = [], {}, [], {}
    # every graph, and the profiler's times of their distinct task nodes (one thread)
    t = time.perf_counter()
    graphs_of, nets, profiles = {}, {}, []
    saved = os.path.join(folder, "alone.profile")      # the profiler's, kept with the runs
    for ranks_, per in done:
        name, devices = f"{ranks_}x{per}", ranks_ * per
        model = shared_devices(from_dict(measured[name]["machine"]), per)
        for a in apps_of_devices(quick)[devices]:
            graphs_of[name, a], nets[devices, a] = graphs(a, devices, model,
                                                          os.path.join(folder, f"d{devices}"))
            if ranks_ == 1 and not os.path.exists(saved):
                profiles.append(measure_profile(graphs_of[name, a], nets[devices, a].int_ranges,
                                                3 if quick else 5, 2))
    if profiles:
        merged(profiles).save(saved)
    base_profiles = Profile.load(saved)
    timing["profile_s"] = round(time.perf_counter() - t, 1)
    t = time.perf_counter()
    for ranks_, per in done:
        name, devices = f"{ranks_}x{per}", ranks_ * per
        apps = apps_of_devices(quick)[devices]
        traces = os.path.join(folder, f"traces_{name}")
        base = from_dict(measured[name]["machine"])
        runs = {(c["app"], c["strategy"]): c for c in measured[name]["cases"]}
        for k, fold in enumerate(FOLDS):
            seen = [p for a in apps for s in fold for p in trace_files(traces, a, s)]
            # the traces record the OS's load over their iteration; for a kept collection
            # of traces from before they did, the load over each traced run
            loads = {path: (runs[a, s_].get("traced_contentions") or
                            [runs[a, s_].get("traced_contention")])[i]
                     for a in apps for s_ in fold
                     for i, path in enumerate(trace_files(traces, a, s_))
                     if not records_load(path)}
            model, profile, fit = calibrate(seen, base, base_profiles, loads=loads,
                                            speed_reference=False)
            # the same at the machine's speed reference, where every run recorded one
            at_speed = calibrate(seen, base, base_profiles, loads=loads,
                                 heldout=False)[2] if all(
                case_reference(runs[a, s_]) for a in apps for s_ in fold) else None
            if at_speed is not None and at_speed.reference_s is None:
                at_speed = None              # a trace without the reference
            residuals[f"{name}, fold {k}"] = fit.residuals
            estimates[f"{name}, fold {k}"] = {"error": fit.heldout.error, "in_sample": fit.error,
                                              "folds": fit.heldout.folds,
                                              "graphs": fit.heldout.graphs,
                                              "rows": list(fit.heldout.rows)}
            os_load = fit.load_source != "the task events"    # the OS's count, comparable
            contention_fits.append({"layout": name, "fold": k, "contention": fit.contention,
                                    "slice_s": fit.slice_s, "load_source": fit.load_source,
                                    "factor": fit.factor})
            held_out = [s for s in STRATEGIES if s not in fold]
            for a in apps:
                for strategy in held_out:
                    g = graphs_of[name, a][strategy]
                    ints = nets[devices, a].int_ranges
                    pred = predict(fit, g, ints, ranks_, per)
                    c = runs[(a, strategy)]
                    referenced = None           # at the speed the case's runs had
                    if at_speed is not None and case_reference(c):
                        referenced = predict(at_speed, g, ints, ranks_, per,
                                             reference_s=case_reference(c))
                    plain = predict(fit, g, ints, ranks_, per, factor=1.0)
                    before = simulate(g, shared_devices(base, per),
                                      CostModel(base_profiles, int_ranges=ints)).makespan
                    work = predict(fit, g, ints, ranks_, per, contention=1.0, factor=1.0,
                                   wakeups=False, traced=True)  # work: not the ranks' sleeps,
                    # every node, as the traced runs whose CPU it is compared with
                    cpu = traced_cpu(trace_files(traces, a, strategy))
                    span = traced_span(trace_files(traces, a, strategy))
                    m, spread_s = measurement(c)
                    # at the load the OS counted during the measurement's runs
                    at_load = None
                    if os_load and c.get("contention") and all(c["contention"]):
                        at_load = predict(fit, g, ints, ranks_, per, contention=max(
                            1.0, statistics.median(c["contention"])))
                    at_both = None          # at the load and the speed of the case's runs
                    if referenced is not None and at_load is not None:
                        at_both = predict(at_speed, g, ints, ranks_, per, contention=max(
                            1.0, statistics.median(c["contention"])),
                            reference_s=case_reference(c))
                    judged_data = judged_error = judged_margin = None  # one judges both
                    if strategy == "searched" and "data" in fold:
                        times = dict((n, t) for t, n in judged(
                            fit, {"searched": g, "data": graphs_of[name, a]["data"]}, ints,
                            ranks_, per))
                        judged_data, judged_error = times["data"], margin(fit)[0]
                        judged_margin = "held out" if fit.heldout.error is not None else \
                            "in-sample"
                    cases.append({
                        "app": a, "ranks": ranks_, "devices_per_rank": per,
                        "layout": name, "strategy": strategy, "calibrated_on": list(fold),
                        "fold": k,
                        "measured_s": m, "spread_s": spread_s,
                        "periods_s": c.get("periods_s"),
                        "predicted_s": pred, "error": (pred - m) / m,
                        "without_factor_s": plain,
                        "iteration_factor": fit.factor,
                        "uncalibrated_s": before,
                        "uncalibrated_error": (before - m) / m,
                        "nodes": len(g.nodes), "runs_s": c["runs_s"],
                        "load": c.get("load"), "at_load_s": at_load,
                        "contention": c.get("contention"),
                        "calibration_contention": fit.contention,
                        "work_s": work, "traced_cpu_s": cpu, "traced_span_s": span,
                        "traced_periods_s": c.get("traced_periods_s"),
                        "judged_data_s": judged_data, "judged_error": judged_error,
                        "judged_margin": judged_margin, "judged_in_sample": fit.error,
                        "reference_s": case_reference(c),
                        "calibration_reference_s": at_speed and at_speed.reference_s,
                        "at_reference_s": referenced,
                        "at_load_and_reference_s": at_both})
    timing["calibrate_predict_s"] = round(time.perf_counter() - t, 1)
    machines = {r: measured[r]["machine"].get("calibration", {}) for r in measured}
    timing["load_average"] = {r: measured[r]["load"] for r in measured}
    timing["measured_at"] = data.get("date")
    timing["analyse_s"] = round(time.perf_counter() - t0, 1)
    timing["contention"] = contention_fits
    return report(cases, timing, machines, quick, residuals, estimates)


def case_reference(case: dict) -> float | None:
    """The machine's speed while a case's timed runs ran: the median of every rank's
    reference timings before and after each of them (strategy/speedref.py; the worker's
    "references"); None for a collection without them."""
    from strategy.speedref import median_reference
    return median_reference(rec for run in case.get("references") or [] for rec in run)


def traced_cpu(paths) -> float | None:
    """The median over a case's traced runs of the busiest rank's CPU seconds in its traced
    iteration (the trace's taskrt.trace.LOAD_EVENT records); None without them."""
    from taskrt.trace import LOAD_EVENT
    per_run = []
    for path in paths:
        with open(path) as f:
            cpu = [(e.get("args") or {}).get("cpu_s") for e in
                   json.load(f).get("traceEvents", []) if e.get("name") == LOAD_EVENT]
        if cpu and all(isinstance(x, (int, float)) and x > 0 for x in cpu):
            per_run.append(max(cpu))
    return statistics.median(per_run) if per_run else None


def work_rows(cases: list[dict]) -> list[tuple]:
    """The load-free check: each held-out case's predicted work (contention 1, no
    iteration factor) against the CPU seconds of its own traced runs' busiest rank."""
    have = [c for c in cases if c.get("traced_cpu_s")]
    if not have:
        return []
    def errors(cs):
        return relative_errors([c["work_s"] for c in cs], [c["traced_cpu_s"] for c in cs])
    err = errors(have)
    per = []
    for layout in sorted({c["layout"] for c in have}):
        e = errors([c for c in have if c["layout"] == layout])
        per.append(f"{layout_text(layout)} {100 * statistics.median(e):.1f}% / "
                   f"{100 * max(e):.1f}%")
    return [("predicted work vs the traced runs' CPU seconds: median / worst error",
             f"{100 * statistics.median(err):.1f}% / {100 * max(err):.1f}%",
             f"{len(have)} held-out cases, load-free: the calibration's work (contention 1, "
             "no iteration factor) against the CPU time (schedstat) of the busiest rank in "
             "the case's own traced iterations (median of its runs), which the load does "
             "not stretch; on several ranks that CPU includes polling MPI while waiting. "
             "Per layout: " + "; ".join(per))]


def reference_rows(cases: list[dict]) -> list[tuple]:
    """The errors with the machine's speed reference (strategy/speedref.py): each fold's
    calibration fitted at one speed, each case predicted at the speed its own timed runs
    had; none for a collection without reference timings."""
    have = [dict(c, predicted_s=c["at_reference_s"]) for c in cases if c.get("at_reference_s")]
    if not have:
        return []
    both = [dict(c, predicted_s=c["at_load_and_reference_s"]) for c in cases
            if c.get("at_load_and_reference_s")]
    s = summary(have)
    total, right, wrong = ordered_pairs(have)
    refs = [c["reference_s"] for c in have]
    return [("with the speed reference: median / worst error",
             f"{100 * s['median_error']:.1f}% / {100 * s['worst_error']:.1f}%",
             f"{len(have)} held-out cases; a fixed torch kernel mix timed (CPU) beside every "
             "traced and timed run on every rank (strategy/speedref.py): each calibration's "
             "traces put at one speed, each case predicted at its own runs' speed (the same "
             "number for every case of a moment, never per case). References "
             f"{1e3 * min(refs):.2f}-{1e3 * max(refs):.2f} ms. Per layout: " + per_layout(have)),
            ("with the speed reference: separated pairs ordered right", f"{right} of {total}",
             ("wrong: " + ", ".join(wrong)) if wrong else "all"),
            *([("at the measured load and speed: median / worst error",
                "{:.1f}% / {:.1f}%".format(100 * summary(both)["median_error"],
                                          100 * summary(both)["worst_error"]),
                f"{len(both)} held-out cases: the calibration at the speed reference, each "
                "case predicted at the contention the OS counted during its runs and at its "
                "runs' reference (both measured of the machine at the case's moment); "
                "separated pairs ordered right {1} of {0}. Per layout: ".format(
                    *ordered_pairs(both)) + per_layout(both))]
              if both else [])]


def per_layout(cases: list[dict]) -> str:
    """'1 process x 2 devices 9.9% / 26.5%; 2 ranks ...': median / worst error per layout."""
    out = []
    for layout in sorted({c["layout"] for c in cases}):
        e = summary([c for c in cases if c["layout"] == layout])
        out.append(f"{layout_text(layout)} {100 * e['median_error']:.1f}% / "
                   f"{100 * e['worst_error']:.1f}%")
    return "; ".join(out)


def records_load(trace_path: str) -> bool:
    """Whether a trace holds the OS's load over its iteration (taskrt.trace.LOAD_EVENT)."""
    from taskrt.trace import LOAD_EVENT
    with open(trace_path) as f:
        return any(e.get("name") == LOAD_EVENT for e in json.load(f).get("traceEvents", []))


def layout_text(layout: str) -> str:
    """'1x2' -> '1 process x 2 devices', '2x1' -> '2 ranks'."""
    ranks_, per = (int(x) for x in layout.split("x"))
    return f"{ranks_} ranks" if ranks_ > 1 else f"1 process x {per} devices"


def case_text(c: dict) -> str:
    """'data 72.1 / 80.3 (65.0-90.2) -10%, at load 78.0 -3%': predicted / measured
    (spread) ms, error; the prediction at the measurement's load and its error."""
    lo, hi = c["spread_s"]
    m = c["measured_s"]
    text = (f"{c['strategy']} {1e3 * c['predicted_s']:.1f} / {1e3 * m:.1f} "
            f"({1e3 * lo:.1f}-{1e3 * hi:.1f}) {100 * c['error']:+.0f}%")
    if c.get("at_load_s"):
        text += f", at load {1e3 * c['at_load_s']:.1f} {100 * (c['at_load_s'] - m) / m:+.0f}%"
    if c.get("at_reference_s"):
        text += (f", at speed {1e3 * c['at_reference_s']:.1f} "
                 f"{100 * (c['at_reference_s'] - m) / m:+.0f}%")
    return text


def report(cases: list[dict], timing: dict, machines: dict, quick: bool,
           residuals: dict | None = None, estimates: dict | None = None) -> dict:
    overall = summary(cases)
    before = summary([dict(c, predicted_s=c["uncalibrated_s"]) for c in cases])
    plain = summary([dict(c, predicted_s=c["without_factor_s"]) for c in cases])
    groups = {}
    for c in cases:
        groups.setdefault((c["app"], c["layout"]), []).append(c)
    per_group = {f"{a} {layout_text(lay)}": summary(cs) for (a, lay), cs in groups.items()}
    total, right, wrong = ordered_pairs(cases)
    with_load = all(c.get("at_load_s") for c in cases)
    if with_load:
        at_load = [dict(c, predicted_s=c["at_load_s"]) for c in cases]
        loaded = summary(at_load)
        l_total, l_right, l_wrong = ordered_pairs(at_load)
    load = timing.get("load_average", {})
    loads = [x for v in load.values() for x in v]
    rows = [("median relative error, held-out strategies",
             f"{100 * overall['median_error']:.1f}%",
             f"{len(cases)} cases (apps x layouts x strategies), each predicted by a "
             "calibration on the other fold's traces; measured: median of "
             f"{max(len(c['runs_s']) for c in cases)} runs"
             + ("' periods (barrier to barrier)" if all(c.get("periods_s") for c in cases)
                else "")
             + (f", load average {min(loads):.1f}-{max(loads):.1f} on "
                f"{os.cpu_count()} cores" if loads else "")
             + (f", runs recorded {timing['measured_at']}" if timing.get("measured_at")
                else "") + "; target <= 10%"),
            ("worst relative error, held-out strategies", f"{100 * overall['worst_error']:.1f}%",
             "target <= 25%"),
            ("clearly separated pairs ordered right", f"{right} of {total}",
             "pairs of one app and layout whose measured medians differ by more than their "
             "run-to-run spreads" + (f"; wrong: {', '.join(wrong)}" if wrong else "")),
            *([("at the measured load: median / worst error",
                f"{100 * loaded['median_error']:.1f}% / {100 * loaded['worst_error']:.1f}%",
                "the same calibrations at the contention (wall seconds per second of work) "
                "the OS counted during the case's runs instead of during the calibrating "
                "traces (schedstat: (CPU + run-queue wait) / CPU); measured, not fitted: "
                "the model's error without the load's drift"),
               ("at the measured load: separated pairs ordered right",
                f"{l_right} of {l_total}", ("wrong: " + ", ".join(l_wrong)) if l_wrong
                else "all")] if with_load else []),
            *reference_rows(cases),
            *work_rows(cases),
            *traced_rows(cases, layout_text),
            ("calibrated without the iteration factor: median / worst error",
             f"{100 * plain['median_error']:.1f}% / {100 * plain['worst_error']:.1f}%",
             "host costs and in-situ task times only; factors fitted: " +
             ", ".join(sorted({f"{layout_text(c['layout'])} {c['iteration_factor']:.2f}"
                               for c in cases}))),
            ("uncalibrated (profiler times, no host costs): median / worst error",
             f"{100 * before['median_error']:.1f}% / {100 * before['worst_error']:.1f}%",
             "the same cases, as the simulator predicted before calibration")]
    for layout in sorted({c["layout"] for c in cases}):
        s = summary([c for c in cases if c["layout"] == layout])
        rows.append((f"{layout_text(layout)}: median / worst error",
                     f"{100 * s['median_error']:.1f}% / {100 * s['worst_error']:.1f}%",
                     f"{s['cases']} cases"))
    for (a, lay), cs in groups.items():
        s = per_group[f"{a} {layout_text(lay)}"]
        rows.append((f"{a} {layout_text(lay)}: median / worst error",
                     f"{100 * s['median_error']:.0f}% / {100 * s['worst_error']:.0f}%",
                     "predicted / measured (run-to-run spread) ms, error: " +
                     "; ".join(case_text(c) for c in cs)))
    versus = searched_vs_data(cases, "at_load_s" if with_load else "predicted_s")
    if versus:
        faster = [v for v in versus if v.endswith("HELD")]
        held = [v for v in faster if not v.endswith("NOT HELD")]
        rows.append(("searched strategy predicted faster than data parallel: also faster "
                     "when run", f"{len(held)} of {len(faster)}",
                     "searched / data parallel iteration time"
                     f"{' at the measured load' if with_load else ''} (each predicted by the "
                     "calibration of the other fold; the searched strategy of a layout's "
                     "devices is the collection's, found on one process's model with "
                     "analytic costs): " + "; ".join(versus)))
    rows.extend(judged_rows(cases))
    rows.extend(heldout_rows(estimates or {}, cases, layout_text))
    if residuals:
        errs = [abs(p - m) / m for rs in residuals.values() for _, m, p in rs]
        rows.append(("calibration residuals (traced runs it was fitted to)",
                     f"median {100 * statistics.median(errs):.1f}%, worst "
                     f"{100 * max(errs):.1f}%", f"{len(errs)} traced strategies (each the "
                     "median of its traced runs' untraced periods, which their traces keep, "
                     "or, where a trace keeps none, of their traced iterations)"))
    return {"title": "simulator accuracy (predicted vs measured iteration time)", "rows": rows,
            "results": {"cases": cases, "overall": overall, "uncalibrated": before,
                        "without_factor": plain,
                        "pairs": {"separated": total, "ordered": right, "wrong": wrong},
                        "at_load": ({"summary": loaded, "ordered": l_right,
                                     "wrong": l_wrong} if with_load else None),
                        "at_reference": (summary([dict(c, predicted_s=c["at_reference_s"])
                                                  for c in cases])
                                         if all(c.get("at_reference_s") for c in cases)
                                         else None),
                        "groups": per_group, "residuals": residuals or {}, "timing": timing,
                        "heldout_estimates": estimates or {},
                        "calibration": machines, "quick": quick}}
