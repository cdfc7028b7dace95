"""Simulator accuracy: predicted vs measured iteration time of real training runs, with the
simulator calibrated on some strategies and asked about others it never saw.

Apps at --small (AlexNet, Inception-v3, RNNLM, Transformer) x seven strategies (data,
parameter, attribute and operation parallel, two random ones: strategy/standard.py, and the
best of a seeded MCMC search of 300 proposals on the uncalibrated local model with analytic
costs, as a user without a calibration would search) x two
layouts of 2 devices: one process driving 2 logical devices (--devices-per-rank 2, taskrt's
LocalExecutor) and `mpirun -np 2` with one device per rank (the MPIExecutor). 4 ranks are
not measured: this machine has 2 cores, and 4 ranks would time the OS's scheduler.

- measured: the apps themselves train with --strategy FILE, untraced (median of their timed
  iterations, with the spread: 25th-75th percentile), run by this file as a worker (a
  plain process for 1 rank, mpirun for 2), which also calibrates the local machine model
  (calibrate_local: device speeds, ping-pongs, all-reduce) for its layout; just before its
  timed run each case runs once more with --trace (one warm-up, one traced iteration), so
  that traces and timings see the same load on a shared machine;
- calibrated (cross-validated): the strategies are split in two folds; the traces of one
  fold (every app) calibrate the layout's model (strategy/calibration.py: host costs per
  node kind, in-situ task times, the profiler's times scaled to in situ for keys not seen)
  and predict the strategies of the other fold, which it never saw;
- without the iteration factor: the same calibration without its last step (a factor on
  task times and host costs fitted to the calibrating runs' iteration times);
- uncalibrated: the same graphs on calibrate_local's model with the profiler's times (one
  torch thread, every graph's distinct task nodes), as before calibration existed.

Reported: median and worst relative error, and the ordering of every pair of strategies of
one app and layout whose measured medians differ by more than the sum of their spreads;
`results["cases"]` lists every case.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

if __package__ in (None, ""):            # run as a worker script
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._common import ROOT, run_mpi_worker  # noqa: E402

STRATEGIES = ("data", "parameter", "attribute", "operation", "random0", "random1",
              "searched")
FOLDS = (("data", "attribute", "random0"), ("parameter", "operation", "random1", "searched"))
SEARCH_PROPOSALS = 300            # the searched strategy: seed 0, analytic costs
DEVICES = 2
LAYOUTS = ((1, 2), (2, 1))                # (ranks, devices per rank)


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


# -- strategies and graphs ----------------------------------------------------------------
def app_argv() -> list[str]:
    return ["--small", "--batch-size", str(8 * DEVICES)]


def strategies(model, machine_model=None, quick: bool = False) -> dict:
    """The standard strategies, two random ones and, given a machine model, the best the
    MCMC search finds on it (seed 0, analytic costs: what a user searching without a
    calibration would get)."""
    from strategy import standard
    devices = list(range(DEVICES))
    out = {name: fn(model, devices) for name, fn in standard.STANDARD.items()}
    for seed in (0, 1):
        out[f"random{seed}"] = standard.random_strategy(model, devices, seed)
    if machine_model is not None:
        import warnings
        from strategy.costs import CostModel, CostWarning
        from strategy.search import search
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CostWarning)
            found = search(model, machine_model, CostModel(), budget_s=60,
                           proposals=30 if quick else SEARCH_PROPOSALS, seed=0)
        out["searched"] = found.configs
    return out


def write_strategies(app_name: str, argv: list[str], folder: str, machine_model,
                     quick: bool = False) -> dict:
    """Strategy files of app_name in folder; returns {strategy: path}."""
    from strategy import files
    from strategy.costs.app_profile import load_app
    from taskrt import Machine
    net = load_app(app_name, argv, DEVICES)
    paths = {}
    for name, s in strategies(net.model, machine_model, quick).items():
        paths[name] = os.path.join(folder, f"{app_name}_{name}.json")
        files.save(paths[name], s, net.model, Machine.local(DEVICES))
    return paths


# -- the worker: calibrate, then train every case ------------------------------------------
def worker(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("--apps", required=True)
    ap.add_argument("--devices-per-rank", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--trace-dir", default=None,
                    help="also write each case's --trace there (APP_STRATEGY.json)")
    a = ap.parse_args(argv)
    from apps.common import run
    from strategy.workload import load_workload
    from strategy.machines.calibrate import calibrate_local
    from strategy.machines.fileformat import to_dict
    machine = calibrate_local()
    out = {"machine": to_dict(machine), "cases": [], "load": [os.getloadavg()[0]]}
    for app_name in a.apps.split(","):
        app = load_workload(app_name)
        for name in STRATEGIES:
            path = os.path.join(a.folder, f"{app_name}_{name}.json")
            argv = app_argv() + ["--strategy", path, "--quiet", "--json",
                                 "--devices-per-rank", str(a.devices_per_rank)]
            if a.trace_dir:        # traced just before the timed run: under the same load
                run(app, argv + ["--iterations", "1", "--warmup", "1", "--trace",
                                 os.path.join(a.trace_dir, f"{app_name}_{name}.json")],
                    out=None)
            res = run(app, argv + ["--iterations", str(a.iterations), "--warmup",
                                   str(a.warmup)], out=None)
            out["cases"].append({"app": app_name, "strategy": name,
                                 "measured_s": res.iteration_time,
                                 "times_s": res.times})
    out["load"].append(os.getloadavg()[0])
    return out


def run_worker(ranks: int, per_rank: int, folder: str, apps: list[str], iterations: int,
               warmup: int, trace_dir: str | None = None) -> dict:
    args = [folder, "--apps", ",".join(apps), "--devices-per-rank", str(per_rank),
            "--iterations", str(iterations), "--warmup", str(warmup)]
    if trace_dir:
        args += ["--trace-dir", trace_dir]
    if ranks > 1:
        return run_mpi_worker(ranks, "sim_accuracy.py", args)
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "sim_accuracy.py"), *args],
                       capture_output=True, text=True, env=env, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"sim_accuracy worker failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


# -- prediction --------------------------------------------------------------------------
def graphs(app_name: str, argv: list[str], machine_model, folder: str
           ) -> tuple[dict, object]:
    """{strategy: TaskGraph} of the app's strategy files in folder on the machine model's
    taskrt machine, and the network (for its int ranges)."""
    from parallel_ops.lowering import lower
    from strategy import files
    from strategy.costs.app_profile import load_app
    from taskrt import plan
    net = load_app(app_name, argv, DEVICES)
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


def spread(times) -> tuple[float, float]:
    """(25th, 75th percentile) of a case's iteration times."""
    q = statistics.quantiles(times, n=4, method="inclusive") if len(times) > 1 else \
        [times[0]] * 3
    return q[0], q[2]


def ordered_pairs(cases: list[dict]) -> tuple[int, int, list]:
    """(pairs clearly separated, of them ordered right by the prediction, the wrong ones):
    pairs of strategies of one app and layout whose measured medians differ by more than
    the sum of their spreads (75th - 25th percentile)."""
    groups: dict = {}
    for c in cases:
        groups.setdefault((c["app"], c["ranks"]), []).append(c)
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
                    wrong.append(f"{a['app']} {a['ranks']}r {a['strategy']}/{b['strategy']}")
    return total, right, wrong


def run(quick: bool = False) -> dict:
    import warnings
    from strategy.calibration import calibrate
    from strategy.costs import CostModel, CostWarning
    from strategy.logical_devices import shared as shared_devices
    from strategy.machines.fileformat import from_dict
    from strategy.simulator import simulate
    warnings.simplefilter("ignore", CostWarning)
    apps = ["alexnet", "rnnlm"] if quick else ["alexnet", "inception", "rnnlm", "transformer"]
    iterations, warmup = (2, 1) if quick else (5, 2)
    repeats = 3 if quick else 5
    t0 = time.perf_counter()
    cases, timing, residuals = [], {}, {}
    with tempfile.TemporaryDirectory(prefix="simacc-") as folder:
        argv = app_argv()
        from strategy.machines import calibrate_local
        search_on = shared_devices(calibrate_local(), DEVICES)
        t = time.perf_counter()
        for a in apps:
            write_strategies(a, argv, folder, search_on, quick)
        timing["search_s"] = round(time.perf_counter() - t, 1)
        measured, traces = {}, {}
        for ranks_, per in LAYOUTS:
            t = time.perf_counter()
            traces[ranks_] = os.path.join(folder, f"traces{ranks_}")
            os.makedirs(traces[ranks_])
            measured[ranks_] = run_worker(ranks_, per, folder, apps, iterations, warmup,
                                          trace_dir=traces[ranks_])
            timing[f"measure_and_trace_{ranks_}_rank_s"] = round(time.perf_counter() - t, 1)
        # every graph, and the profiler's times of their distinct task nodes (one thread)
        t = time.perf_counter()
        graphs_of, nets, base_profiles = {}, {}, None
        for ranks_, per in LAYOUTS:
            model = shared_devices(from_dict(measured[ranks_]["machine"]), per)
            for a in apps:
                graphs_of[ranks_, a], nets[a] = graphs(a, argv, model, folder)
        from strategy.costs.profile import merged
        base_profiles = merged([measure_profile(graphs_of[1, a], nets[a].int_ranges, repeats, 2)
                                for a in apps])
        timing["profile_s"] = round(time.perf_counter() - t, 1)
        t = time.perf_counter()
        for ranks_, per in LAYOUTS:
            base = from_dict(measured[ranks_]["machine"])
            runs = {(c["app"], c["strategy"]): c for c in measured[ranks_]["cases"]}
            for k, fold in enumerate(FOLDS):
                seen = [os.path.join(traces[ranks_], f"{a}_{s}.json") for a in apps for s in fold]
                model, profile, fit = calibrate(seen, base, base_profiles)
                residuals[f"{ranks_} rank{'s' if ranks_ > 1 else ''}, fold {k}"] = \
                    fit.residuals
                held_out = [s for s in STRATEGIES if s not in fold]
                for a in apps:
                    for name in held_out:
                        g = graphs_of[ranks_, a][name]
                        ints = nets[a].int_ranges
                        pred = simulate(g, shared_devices(model, per),
                                        CostModel(profile, int_ranges=ints))
                        plain = simulate(g, shared_devices(fit.unscaled[0], per),
                                         CostModel(fit.unscaled[1], int_ranges=ints))
                        before = simulate(g, shared_devices(base, per),
                                          CostModel(base_profiles, int_ranges=ints))
                        c = runs[(a, name)]
                        m = c["measured_s"]
                        cases.append({
                            "app": a, "ranks": ranks_, "devices_per_rank": per,
                            "strategy": name, "calibrated_on": list(fold),
                            "measured_s": m, "spread_s": spread(c["times_s"]),
                            "predicted_s": pred.makespan, "error": (pred.makespan - m) / m,
                            "without_factor_s": plain.makespan,
                            "iteration_factor": fit.factor,
                            "uncalibrated_s": before.makespan,
                            "uncalibrated_error": (before.makespan - m) / m,
                            "nodes": len(g.nodes), "times_s": c["times_s"]})
        timing["calibrate_predict_s"] = round(time.perf_counter() - t, 1)
        machines = {r: measured[r]["machine"].get("calibration", {}) for r, _ in LAYOUTS}
        timing["load_average"] = {r: measured[r]["load"] for r, _ in LAYOUTS}
    timing["total_s"] = round(time.perf_counter() - t0, 1)
    return report(cases, timing, machines, quick, residuals)


def report(cases: list[dict], timing: dict, machines: dict, quick: bool,
           residuals: dict | None = None) -> dict:
    overall = summary(cases)
    before = summary([dict(c, predicted_s=c["uncalibrated_s"]) for c in cases])
    plain = summary([dict(c, predicted_s=c["without_factor_s"]) for c in cases])
    groups = {}
    for c in cases:
        groups.setdefault((c["app"], c["ranks"]), []).append(c)
    per_group = {f"{a} {r} rank{'s' if r > 1 else ''}": summary(cs)
                 for (a, r), cs in groups.items()}
    total, right, wrong = ordered_pairs(cases)
    rows = [("median relative error, held-out strategies",
             f"{100 * overall['median_error']:.1f}%",
             f"{len(cases)} cases (apps x layouts x strategies), each predicted by a "
             "calibration on the other fold's traces; target <= 10%"),
            ("worst relative error, held-out strategies", f"{100 * overall['worst_error']:.1f}%",
             "target <= 25%"),
            ("clearly separated pairs ordered right", f"{right} of {total}",
             "pairs of one app and layout whose measured medians differ by more than their "
             "spreads" + (f"; wrong: {', '.join(wrong)}" if wrong else "")),
            ("calibrated without the iteration factor: median / worst error",
             f"{100 * plain['median_error']:.1f}% / {100 * plain['worst_error']:.1f}%",
             "host costs and in-situ task times only; factors fitted: " +
             ", ".join(sorted({f"{c['ranks']} rank{'s' if c['ranks'] > 1 else ''} "
                               f"{c['iteration_factor']:.2f}" for c in cases}))),
            ("uncalibrated (profiler times, no host costs): median / worst error",
             f"{100 * before['median_error']:.1f}% / {100 * before['worst_error']:.1f}%",
             "the same cases, as the simulator predicted before calibration")]
    for layout in sorted({c["ranks"] for c in cases}):
        s = summary([c for c in cases if c["ranks"] == layout])
        rows.append((f"{layout} rank{'s' if layout > 1 else ''}"
                     f"{' x 2 logical devices' if layout == 1 else ''}: median / worst error",
                     f"{100 * s['median_error']:.1f}% / {100 * s['worst_error']:.1f}%",
                     f"{s['cases']} cases"))
    for name, s in per_group.items():
        rows.append((f"{name}: median / worst error",
                     f"{100 * s['median_error']:.0f}% / {100 * s['worst_error']:.0f}%",
                     f"{s['cases']} held-out strategies"))
    if residuals:
        errs = [abs(p - m) / m for rs in residuals.values() for _, m, p in rs]
        rows.append(("calibration residuals (traced runs it was fitted to)",
                     f"median {100 * statistics.median(errs):.1f}%, worst "
                     f"{100 * max(errs):.1f}%", f"{len(errs)} traced runs"))
    return {"title": "simulator accuracy (predicted vs measured iteration time)", "rows": rows,
            "results": {"cases": cases, "overall": overall, "uncalibrated": before,
                        "without_factor": plain,
                        "pairs": {"separated": total, "ordered": right, "wrong": wrong},
                        "groups": per_group, "residuals": residuals or {}, "timing": timing,
                        "calibration": machines, "quick": quick}}


if __name__ == "__main__":
    result = worker()
    from taskrt.discovery import launched_by_mpi
    rank = 0
    if launched_by_mpi():
        from mpi4py import MPI
        rank = MPI.COMM_WORLD.Get_rank()
    if rank == 0:
        print(json.dumps(result))
