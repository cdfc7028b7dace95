"""The simulator-accuracy benchmark's data collection (bench/sim_accuracy.py analyses it):
the strategy files of every app and layout, and the worker that trains every case with them.

- strategies: data, parameter, attribute and operation parallel, two random ones
  (strategy/standard.py) and the best of a seeded MCMC search on the uncalibrated local
  model with analytic costs (write_strategies);
- the worker (this file run as a script: a plain process for one rank, mpirun for
  several) calibrates the local machine model for its layout (calibrate_local), then per
  case runs the app TRACES times with --trace (the timed runs' warm-up and iterations
  untraced, then one traced: the trace keeps the period of the untraced ones) and
  REPEATS times untraced (ITERATIONS iterations after a warm-up each), the two taking turns,
  recording each run's period (barrier to barrier over its timed iterations:
  apps/report.py Result.period_s) beside its per-iteration times, the load the job felt
  during each (contention_since) and the machine's speed before and after each run on
  every rank (strategy/speedref.py; a traced run times it around its iterations and
  writes it in its trace);
- collect() writes folder/d<devices>/APP_STRATEGY.json, folder/traces_RxK/APP_STRATEGY.json
  (and APP_STRATEGY.tI.json for the further traced runs) and folder/measured.json
  (folder/partial.json after each layout: an interrupted collection resumes layout by
  layout).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

if __package__ in (None, ""):            # run as a worker script
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._common import ROOT, run_mpi_worker  # noqa: E402

STRATEGIES = ("data", "parameter", "attribute", "operation", "random0", "random1",
              "searched")
SEARCH_PROPOSALS = 200            # the searched strategy: seed 0, analytic costs
LAYOUTS = ((1, 2), (2, 1), (1, 4), (4, 1))       # (ranks, devices per rank)
APPS = ("alexnet", "inception", "rnnlm", "transformer")
# Inception-v3 takes 2 s an iteration here: on 4 devices (4 ranks on 2 cores) it would take
# most of the benchmark's time; the 4-device layouts run the other three.
APPS_OF_DEVICES = {2: APPS, 4: ("alexnet", "rnnlm", "transformer")}
REPEATS = 3                       # separate runs of each case (run-to-run spread)
# Timed iterations of each run (after one warm-up). 3 until 2026-12-06: on 4 ranks on 2 cores
# one iteration's time scatters (coefficient of variation 12%, median over the cases of
# 2026-12-05 22:36, against 3-5% on 1 process and 2 ranks), so a case's 3 periods of 3
# iterations were 1.16x apart (median; up to 1.43x), which both the measured medians and the
# calibrating traces' periods carried; a mean of 10 has about half that scatter, for ~3 more
# minutes of collection.
ITERATIONS = 10
# Traced runs of each case (one traced iteration each), taking turns with the timed runs: one
# traced iteration differed from its case's measured median by 15.8% (median over the cases
# of 2026-12-02 05:33) at a load of 4-11, so a calibration fits the median of several.
TRACES = 3
# A traced run times as many untraced iterations as a timed run (after the same warm-up), then
# traces one more: their period is what its trace keeps for calibration (apps/training.py,
# calibration.residuals), over the same window as the measured periods. With 2 untraced
# iterations before the traced 4th (2026-12-05 22:36), the traced runs' periods were 1.03-1.08x
# the timed runs' of 3 (medians per layout; quartiles up to 1.43): the first iterations after
# the warm-up are the slowest, and a shorter window weighs them more.


# -- strategies and graphs ----------------------------------------------------------------
def app_argv(devices: int) -> list[str]:
    """The apps' flags: --small, 8 samples per device."""
    return ["--small", "--batch-size", str(8 * devices)]


def strategies(model, devices: int, machine_model=None, quick: bool = False) -> dict:
    """The standard strategies, two random ones and, given a machine model, the best the
    MCMC search finds on it (seed 0, analytic costs: what a user searching without a
    calibration would get)."""
    from strategy import standard
    devices = list(range(devices))
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


def write_strategies(app_name: str, devices: int, folder: str, machine_model,
                     quick: bool = False) -> dict:
    """Strategy files of app_name on `devices` devices in folder; returns {strategy: path}."""
    from strategy import files
    from strategy.costs.app_profile import load_app
    from taskrt import Machine
    net = load_app(app_name, app_argv(devices), devices)
    paths = {}
    for name, s in strategies(net.model, devices, machine_model, quick).items():
        paths[name] = os.path.join(folder, f"{app_name}_{name}.json")
        files.save(paths[name], s, net.model, Machine.local(devices))
    return paths


# -- the worker: calibrate, then train every case ------------------------------------------
def worker(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("--apps", required=True)
    ap.add_argument("--devices-per-rank", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1, help="separate runs of each case")
    ap.add_argument("--trace-dir", default=None,
                    help="also write each case's --trace there (trace_name)")
    ap.add_argument("--traces", type=int, default=1, help="traced runs of each case")
    a = ap.parse_args(argv)
    from apps.common import run
    from apps.report import idle_schedule
    from strategy.workload import load_workload
    from strategy.machines.calibrate import calibrate_local
    from strategy.machines.fileformat import to_dict
    machine = calibrate_local()
    out = {"machine": to_dict(machine), "cases": [], "load": [os.getloadavg()[0]]}
    devices = a.devices_per_rank * world_size()

    from strategy.speedref import reference_s
    from taskrt.trace import sched_times

    def run_timed(argv, trace=None):
        """(result, contention while it ran: every rank's CPU and run-queue wait, the
        machine's speed reference before and after it on every rank: strategy/speedref.py;
        a traced run times it around its iterations itself and writes it in its trace)."""
        ref = None if trace else reference_s()
        before = sched_times()
        res = run(app, argv + (["--trace", trace] if trace else []), out=None)
        c = contention_since(before)
        refs = every_rank(res.speed_reference if trace else
                          {"before_s": ref, "after_s": reference_s()})
        return res, c, refs
    for app_name in a.apps.split(","):
        app = load_workload(app_name)
        argvs = {name: app_argv(devices) + [
                     "--strategy", os.path.join(a.folder, f"{app_name}_{name}.json"), "--quiet",
                     "--json", "--devices-per-rank", str(a.devices_per_rank)]
                 for name in STRATEGIES}
        (runs, periods, contention, traced, references, traced_refs, traced_periods,
         schedules) = ({name: [] for name in STRATEGIES} for _ in range(8))
        # Rounds of every strategy once, each round in another order (rotated), traced and
        # timed runs taking turns: every strategy sees the same loads and the same places in
        # the worker's life (with all runs of a strategy in a row, data parallel, run first,
        # ran its tasks at 0.6x their times in the other strategies' runs, 2026-12-03; in-order
        # collections cannot tell the order's part from the strategy's).
        for i in range(max(a.repeats, a.traces if a.trace_dir else 0)):
            k = i % len(STRATEGIES)
            for name in STRATEGIES[k:] + STRATEGIES[:k]:
                argv = argvs[name]
                if a.trace_dir and i < a.traces:
                    res, c, refs = run_timed(
                        argv + ["--iterations", str(a.iterations + 1),
                                "--warmup", str(a.warmup)],
                        os.path.join(a.trace_dir, trace_name(app_name, name, i)))
                    traced[name].append(c)
                    traced_periods[name].append(res.period_s)
                    traced_refs[name].append(refs)
                if i < a.repeats:
                    res, c, refs = run_timed(argv + ["--iterations", str(a.iterations),
                                                     "--warmup", str(a.warmup)])
                    runs[name].append(res.times)
                    periods[name].append(res.period_s)
                    schedules[name].append(idle_schedule(res.trainer))
                    contention[name].append(c)
                    references[name].append(refs)
        for name in STRATEGIES:
            out["cases"].append({"app": app_name, "strategy": name,
                                 # each run's period (apps/report.py Result.period_s)
                                 "measured_s": statistics.median(periods[name]),
                                 "periods_s": periods[name],
                                 # each run's idle schedule beside its period (rank 0's:
                                 # taskrt/executor/policies.py IdleSchedule.to_dict())
                                 "schedules": schedules[name],
                                 "runs_s": runs[name], "load": os.getloadavg()[0],
                                 "contention": contention[name],
                                 "traced_contention": (traced[name] or [None])[0],
                                 "traced_contentions": traced[name],
                                 # per run, per rank {"before_s", "after_s"}: speedref.py
                                 "references": references[name],
                                 "traced_references": traced_refs[name],
                                 # the traced runs' untraced periods (their traces keep them)
                                 "traced_periods_s": traced_periods[name]})
    out["load"].append(os.getloadavg()[0])
    return out


def trace_name(app_name: str, strategy: str, i: int = 0) -> str:
    """The file of a case's i-th traced run: APP_STRATEGY.json, then APP_STRATEGY.tI.json."""
    return f"{app_name}_{strategy}.json" if i == 0 else f"{app_name}_{strategy}.t{i}.json"


def trace_files(folder: str, app_name: str, strategy: str) -> list[str]:
    """The traced runs of a case kept in folder (one in collections before TRACES)."""
    out, i = [], 0
    while os.path.exists(os.path.join(folder, trace_name(app_name, strategy, i))):
        out.append(os.path.join(folder, trace_name(app_name, strategy, i)))
        i += 1
    return out


def contention_since(before) -> float | None:
    """Wall seconds per second of work since `before` (taskrt.trace.sched_times()): (CPU +
    run-queue wait) / CPU, summed over every rank of the job (a collective call under
    MPI; taskrt.trace.contention_of). The machine's load as this job felt it: 1 on an idle
    core, 3 when the OS ran it a third of the time it could have run."""
    from taskrt.trace import contention_of, sched_times
    now = sched_times()
    mine = (now[0] - before[0], now[1] - before[1]) if now and before else (0.0, None)
    records = [{"cpu_s": mine[0], "wait_s": mine[1]}]
    if world_size() > 1:
        from mpi4py import MPI
        records = MPI.COMM_WORLD.allgather(records[0])
    return contention_of(records)


def every_rank(record: dict) -> list[dict]:
    """Every rank's record, rank by rank (a collective call under MPI)."""
    if world_size() == 1:
        return [record]
    from mpi4py import MPI
    return MPI.COMM_WORLD.allgather(record)


def rank_of() -> int:
    """This process's rank (0 without mpirun)."""
    if world_size() == 1:
        return 0
    from mpi4py import MPI
    return MPI.COMM_WORLD.Get_rank()


def world_size() -> int:
    """The ranks of this job (1 without mpirun)."""
    from taskrt.discovery import launched_by_mpi
    if not launched_by_mpi():
        return 1
    from mpi4py import MPI
    return MPI.COMM_WORLD.Get_size()


def run_worker(ranks: int, per_rank: int, folder: str, apps: list[str], iterations: int,
               warmup: int, trace_dir: str | None = None, repeats: int = 1,
               traces: int = 1) -> dict:
    args = [folder, "--apps", ",".join(apps), "--devices-per-rank", str(per_rank),
            "--iterations", str(iterations), "--warmup", str(warmup), "--repeats",
            str(repeats), "--traces", str(traces)]
    if trace_dir:
        args += ["--trace-dir", trace_dir]
    if ranks > 1:
        return run_mpi_worker(ranks, "_sim_accuracy_runs.py", args, timeout=3600)
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1")
    script = os.path.join(ROOT, "bench", "_sim_accuracy_runs.py")
    p = subprocess.run([sys.executable, script, *args],
                       capture_output=True, text=True, env=env, timeout=3600)
    if p.returncode != 0:
        raise RuntimeError(f"sim_accuracy worker failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def collect(folder: str, quick: bool = False) -> dict:
    """Write the strategies, then train and trace every case of every layout (the workers);
    the measurements go to folder/measured.json, the traces to folder/traces_RxK/."""
    from strategy.logical_devices import shared as shared_devices
    from strategy.machines import calibrate_local
    timing: dict = {}
    t = time.perf_counter()
    local = calibrate_local()
    for devices, apps in apps_of_devices(quick).items():
        sub = os.path.join(folder, f"d{devices}")
        os.makedirs(sub, exist_ok=True)
        for a in apps:
            if not all(os.path.exists(os.path.join(sub, f"{a}_{s}.json"))
                       for s in STRATEGIES):      # a kept folder's strategies are reused
                write_strategies(a, devices, sub, shared_devices(local, devices), quick)
    timing["search_s"] = round(time.perf_counter() - t, 1)
    iterations, warmup, repeats, traced = ((2, 1, 1, 1) if quick
                                          else (ITERATIONS, 1, REPEATS, TRACES))
    path = os.path.join(folder, "measured.json")
    data = {"measured": {}, "timing": timing, "quick": quick}
    if os.path.exists(os.path.join(folder, "partial.json")):    # an interrupted collection
        with open(os.path.join(folder, "partial.json")) as f:
            data = json.load(f)
    for ranks_, per in layouts(quick):
        name = f"{ranks_}x{per}"
        if name in data["measured"]:
            continue
        t = time.perf_counter()
        traces = os.path.join(folder, f"traces_{name}")
        os.makedirs(traces, exist_ok=True)
        devices = ranks_ * per
        data["measured"][name] = run_worker(
            ranks_, per, os.path.join(folder, f"d{devices}"),
            list(apps_of_devices(quick)[devices]), iterations, warmup, trace_dir=traces,
            repeats=repeats, traces=traced)
        data["timing"][f"measure_and_trace_{name}_s"] = round(time.perf_counter() - t, 1)
        with open(os.path.join(folder, "partial.json"), "w") as f:   # layout by layout
            json.dump(data, f)
    data["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    with open(path, "w") as f:
        json.dump(data, f)
    return data


def layouts(quick: bool) -> tuple:
    return LAYOUTS[:2] if quick else LAYOUTS


def apps_of_devices(quick: bool) -> dict:
    """{devices: apps measured on that many devices}."""
    if quick:
        return {2: ("alexnet", "rnnlm")}
    return APPS_OF_DEVICES


if __name__ == "__main__":
    result = worker()
    if rank_of() == 0:
        print(json.dumps(result))
