"""Simulator accuracy: predicted vs measured iteration time of real training runs.

Apps at --small x the standard strategies (data, parameter, attribute, operation parallel and
a random one, strategy/standard.py) x two layouts of 2 devices: one process driving 2
logical devices (--devices-per-rank 2) and `mpirun -np 2` with one device per rank.

- measured: the apps themselves train with --strategy FILE (median iteration time of their
  --json result), run by this file as a worker: a plain process for 1 rank, under mpirun
  for 2; each worker also calibrates the local machine model (calibrate_local) for its
  layout;
- predicted: the same graphs (lower + plan) simulated on that calibrated model (for 1 rank
  its logical devices share one compute unit: strategy/logical_devices.py) with a cost
  model measured now on this machine (a profile of every graph's distinct task nodes, one
  torch thread as the apps use).

Reported: median and worst relative error, Spearman rank correlation of predicted vs
measured (per app and layout, and overall); `results["cases"]` lists every case. The 2-rank
cases are also predicted with task costs taken in situ (strategy.replay.profile_from_trace)
from a traced 1-process run of the same app and strategy: what is left of the error then is
the model of communication and of the executor, not the task costs.
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

STRATEGIES = ("data", "parameter", "attribute", "operation", "random")
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


def strategies(model) -> dict:
    from strategy import standard
    devices = list(range(DEVICES))
    out = {name: fn(model, devices) for name, fn in standard.STANDARD.items()}
    out["random"] = standard.random_strategy(model, devices, 0)
    return out


def write_strategies(app_name: str, argv: list[str], folder: str) -> dict:
    """Strategy files of app_name in folder; returns {strategy: path}."""
    from strategy import files
    from strategy.costs.app_profile import load_app
    from taskrt import Machine
    net = load_app(app_name, argv, DEVICES)
    paths = {}
    for name, s in strategies(net.model).items():
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
    out = {"machine": to_dict(machine), "cases": []}
    for app_name in a.apps.split(","):
        app = load_workload(app_name)
        for name in STRATEGIES:
            path = os.path.join(a.folder, f"{app_name}_{name}.json")
            argv = app_argv() + ["--strategy", path, "--iterations", str(a.iterations),
                                      "--warmup", str(a.warmup), "--quiet", "--json",
                                      "--devices-per-rank", str(a.devices_per_rank)]
            if a.trace_dir:
                argv += ["--trace", os.path.join(a.trace_dir, f"{app_name}_{name}.json")]
            res = run(app, argv, out=None)
            out["cases"].append({"app": app_name, "strategy": name,
                                 "measured_s": res.iteration_time,
                                 "times_s": res.times})
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
def graphs(app_name: str, argv: list[str], machine_model) -> tuple[dict, object]:
    """{strategy: TaskGraph} of the app on the machine model's taskrt machine, and the
    network (for its int ranges)."""
    from parallel_ops.lowering import lower
    from strategy.costs.app_profile import load_app
    from taskrt import plan
    net = load_app(app_name, argv, DEVICES)
    opt = net.optimizer
    machine = machine_model.taskrt_machine()
    out = {}
    for name, s in strategies(net.model).items():
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


def run(quick: bool = False) -> dict:
    from strategy.costs import CostModel
    from strategy.machines.fileformat import from_dict
    from strategy.logical_devices import shared as shared_devices
    from strategy.costs.profile import merged
    from strategy.replay import profile_from_trace
    from strategy.simulator import simulate
    apps = ["alexnet", "rnnlm"] if quick else ["alexnet", "inception", "rnnlm"]
    iterations, warmup = (2, 1) if quick else (5, 2)
    repeats = 3 if quick else 5
    t0 = time.perf_counter()
    cases, timing = [], {}
    with tempfile.TemporaryDirectory(prefix="simacc-") as folder:
        argv = app_argv()
        for a in apps:
            write_strategies(a, argv, folder)
        measured = {}
        for ranks_, per in LAYOUTS:
            t = time.perf_counter()
            measured[ranks_] = run_worker(ranks_, per, folder, apps, iterations, warmup)
            timing[f"measure_{ranks_}_rank_s"] = round(time.perf_counter() - t, 1)
        # traced 1-process runs, apart from the timed ones (tracing costs a little per node)
        t = time.perf_counter()
        traces = os.path.join(folder, "traces")
        os.makedirs(traces)
        run_worker(1, DEVICES, folder, apps, 2, 1, trace_dir=traces)
        timing["trace_1_rank_s"] = round(time.perf_counter() - t, 1)
        profile_s = 0.0
        for a in apps:
            for ranks_, per in LAYOUTS:
                model = shared_devices(from_dict(measured[ranks_]["machine"]), per)
                gs, net = graphs(a, argv, model)
                if ranks_ == 1:                 # the same cost keys for both layouts
                    t = time.perf_counter()
                    costs = CostModel(measure_profile(gs, net.int_ranges, repeats, 2))
                    profile_s += time.perf_counter() - t
                runs = {(c["app"], c["strategy"]): c for c in measured[ranks_]["cases"]}
                for name, g in gs.items():
                    res = simulate(g, model, costs)
                    c = runs[(a, name)]
                    fastest = min(c["times_s"])
                    case = {"app": a, "ranks": ranks_, "devices_per_rank": per,
                            "strategy": name, "measured_s": c["measured_s"],
                            "predicted_s": res.makespan,
                            "error": (res.makespan - c["measured_s"]) / c["measured_s"],
                            "min_error": (res.makespan - fastest) / fastest,
                            "nodes": len(g.nodes), "times_s": c["times_s"]}
                    if ranks_ > 1:
                        insitu = profile_from_trace(os.path.join(traces, f"{a}_{name}.json"))
                        p = simulate(g, model, CostModel(merged([costs.profile, insitu]))
                                     ).makespan
                        case["predicted_in_situ_s"] = p
                        case["error_in_situ"] = (p - c["measured_s"]) / c["measured_s"]
                    cases.append(case)
        timing["profile_s"] = round(profile_s, 1)
        machines = {r: measured[r]["machine"].get("calibration", {}) for r, _ in LAYOUTS}
    timing["total_s"] = round(time.perf_counter() - t0, 1)
    return report(cases, timing, machines, quick)


def report(cases: list[dict], timing: dict, machines: dict, quick: bool) -> dict:
    overall = summary(cases)
    groups = {}
    for c in cases:
        groups.setdefault((c["app"], c["ranks"]), []).append(c)
    per_group = {f"{a} {r} rank{'s' if r > 1 else ''}": summary(cs)
                 for (a, r), cs in groups.items()}
    rows = [("median relative error", f"{100 * overall['median_error']:.1f}%",
             f"{len(cases)} cases; target <= 10%"),
            ("worst relative error", f"{100 * overall['worst_error']:.1f}%", "target <= 30%"),
            ("Spearman rank correlation, all cases", f"{overall['spearman']:.2f}",
             "predicted vs measured iteration times; 1.0 = same ordering")]
    for name, s in per_group.items():
        rows.append((f"{name}: median / worst error, Spearman",
                     f"{100 * s['median_error']:.0f}% / {100 * s['worst_error']:.0f}%, "
                     f"{s['spearman']:.2f}", f"{s['cases']} strategies"))
    in_situ = [dict(c, error=c["error_in_situ"], predicted_s=c["predicted_in_situ_s"])
               for c in cases if "error_in_situ" in c]
    if in_situ:
        s = summary(in_situ)
        per_app = ", ".join(
            f"{a} {100 * statistics.median(abs(c['error']) for c in in_situ if c['app'] == a):.0f}%"
            for a in dict.fromkeys(c["app"] for c in in_situ))
        rows.append(("2 ranks, task costs in situ (from traced 1-process runs): median / worst "
                     "error, Spearman", f"{100 * s['median_error']:.0f}% / "
                     f"{100 * s['worst_error']:.0f}%, {s['spearman']:.2f}",
                     f"{s['cases']} cases; median per app: {per_app}; what is left is the "
                     "model of communication and of the executor"))
        per_group["2 ranks, in situ"] = s
    return {"title": "simulator accuracy (predicted vs measured iteration time)", "rows": rows,
            "results": {"cases": cases, "overall": overall, "groups": per_group,
                        "timing": timing, "calibration": machines, "quick": quick}}


if __name__ == "__main__":
    result = worker()
    from taskrt.discovery import launched_by_mpi
    rank = 0
    if launched_by_mpi():
        from mpi4py import MPI
        rank = MPI.COMM_WORLD.Get_rank()
    if rank == 0:
        print(json.dumps(result))
