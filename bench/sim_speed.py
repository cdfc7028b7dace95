"""Simulator speed: graph build, full simulation and delta simulation at the paper's sizes.

For Inception-v3, NMT and ResNet-101 (paper sizes: per-device batch x GPUs) on 4, 16 and 64
simulated P100s (the paper's cluster with 1, 4 and 16 nodes), data parallel, analytic costs:
  build     lowering + planning of the whole iteration (the TaskGraph);
  full sim  strategy.simulator.simulate of the built graph (cost model warm per cost key, as
            in a search where every strategy reuses the keys measured before);
  delta     SimulationSession.change: one random operator gets a random valid config (mean
            over the changes, run as the search runs them: collector paused, heap frozen
            every GC_EVERY proposals, a collection of the GC_WINDOW proposals after each
            freeze (the search's most frequent schedule); graph update included; the cost
            model has seen the configs' part shapes in an earlier pass);
  rebuild   the full alternative for the same changes: lower + plan + simulate from scratch.
  session   a search's build: SimulationSession of the same strategy (lowering, the
            replannable planner, the delta tables and their first full simulation), warm
            (a session was built before it in this process), the cost of each chain's start.
  (All four in this process's CPU seconds, since 2026-12-02: the machine is shared.)
  search    a real MCMC search (strategy.search, seed 0, a fixed number of proposals) of
            Inception-v3 on 16 GPUs, run twice taking turns: with the planner's memory of
            region plans (taskrt/regionmemo.py) and without it (TASKRT_PLAN_MEMO_NODES=0);
            process CPU seconds, proposals per CPU second, the ratio, and both runs' results
            (which must be equal: the memo gives the same graphs).
  gpt       `apps/transformer.py --simulate` of GPT-3 2.7B's shape (32 layers, width 2560, 32
            heads, sequence 2048, vocabulary 51200, batch 128) on 128 simulated H100s (16
            DGX nodes), data parallel: wall time and peak RSS of the whole process (its
            second run: the first writes the project's bytecode cache, measure_gpt).
The paper's full/delta search-time ratios (Table 5) are 2.2-6.9x; the simulation-core
issue's targets: build + full simulation of Inception-v3 on 16 GPUs in at most 0.1 s, a
proposal in at most 10 ms at 16 GPUs, the GPT run in at most 3 s and 2 GB.
"""
from __future__ import annotations

import gc
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

from parallel_ops import ParallelConfig
from parallel_ops.lowering import lower
from strategy.search import GC_EVERY, GC_WINDOW
from taskrt.gcpause import gc_paused
from taskrt.planner import plan

# Paper Table 5, full / delta end-to-end search time, per app and GPU count.
PAPER_RATIO = {("resnet", 4): 1.4 / 0.4, ("inception", 4): 14 / 4.1, ("nmt", 4): 40 / 16,
               ("resnet", 16): 22 / 7.3, ("inception", 16): 388 / 77, ("nmt", 16): 998 / 328,
               ("resnet", 64): 515 / 158, ("inception", 64): 8817 / 1278,
               ("nmt", 64): 8982 / 2190}
APPS = ("inception", "nmt", "resnet")


def random_config(op, num_devices: int, rng: random.Random) -> ParallelConfig:
    """A uniformly drawn valid config: random degrees per dim (product <= devices, each <= its
    Dim.max_degree) on distinct random devices, like the search's proposal."""
    degrees, parts = {}, 1
    for d in rng.sample(list(op.dims), len(op.dims)):
        k = rng.choice([k for k in range(1, min(d.max_degree, num_devices) + 1)
                        if parts * k <= num_devices])
        degrees[d.name] = k
        parts *= k
    ordered = tuple((d.name, degrees[d.name]) for d in op.dims)
    return ParallelConfig(ordered, tuple(rng.sample(range(num_devices), parts)))


def build_graph(model, strategy, machine, optimizer):
    """Lower and plan one iteration: the TaskGraph (as SimulationSession builds it), its
    survivors moved to the oldest generation as a session's and a prediction's are
    (gc_paused(long_lived=True)): else the first young collection after the pause walks
    every object the build made (~0.15 s at Inception @16), which `--simulate` never pays."""
    with gc_paused(long_lived=True):
        lowered = lower(model, strategy, machine, optimizer)
        return plan(lowered.launches, machine, initial=lowered.initial)


def _clock() -> float:
    """This process's CPU seconds: the machine is shared, and wall time would count the
    other processes' share of its 2 cores (the simulator is single-threaded Python)."""
    return time.process_time()


def measure(app: str, gpus: int, small: bool, changes: int, rebuilds: int, seed: int = 0):
    """Build + full simulation, then `changes` random changes (delta) of which the first
    `rebuilds` are also rebuilt and simulated in full (rebuild_s, ratio: None without)."""
    if changes < 1 or not 0 <= rebuilds <= changes:
        raise ValueError(f"bench.sim_speed.measure: changes={changes}, rebuilds={rebuilds}; "
                         "give changes >= 1 and 0 <= rebuilds <= changes")
    from strategy.costs import CostModel
    from strategy.costs.app_profile import load_app
    from strategy.delta import SimulationSession
    from strategy.machine_model import machine_model
    from strategy.simulator import simulate
    net = load_app(app, ["--small"] if small else [], devices=gpus)
    opt = net.optimizer
    model = net.model
    mm = machine_model(f"p100:{max(1, gpus // 4)}")
    machine = mm.taskrt_machine()
    costs = CostModel()
    t = _clock()
    graph = build_graph(model, None, machine, opt)
    build = _clock() - t
    simulate(graph, mm, costs)                         # warms the cost model per key
    t = _clock()
    full = simulate(graph, mm, costs)
    sim = _clock() - t
    rng = random.Random(seed)
    proposals = [(op, random_config(op, gpus, rng))
                 for op in (rng.choice(model.ops) for _ in range(changes))]
    # A first pass fills the cost model for the new configs' part shapes (a long search
    # has seen them), so that delta and rebuild below both time warm costs.
    warm = SimulationSession(model, mm, costs, None, opt)
    for op, cfg in proposals:
        warm.change(op.name, cfg)
    del warm
    t = _clock()
    session = SimulationSession(model, mm, costs, None, opt)
    session_build = _clock() - t
    assert session.result.makespan == full.makespan
    deltas, rebuilt = [], []
    # As the search runs proposals: collector paused, heap frozen after the build and every
    # GC_EVERY proposals, a collection GC_WINDOW proposals after each freeze (its time
    # counted in that proposal; strategy/search.py, "Garbage collection").
    with gc_paused():
        gc.freeze()
        try:
            for k, (op, cfg) in enumerate(proposals):
                t = _clock()
                if (k + 1) % GC_EVERY == 0:
                    gc.freeze()
                elif (k + 1) % GC_EVERY == GC_WINDOW:
                    gc.collect()
                    gc.freeze()
                got = session.change(op.name, cfg)
                deltas.append(_clock() - t)
                if k < rebuilds:
                    t = _clock()
                    fresh = simulate(build_graph(model, dict(session.configs), machine, opt),
                                     mm, costs)
                    rebuilt.append(_clock() - t)
                    if fresh.makespan != got.makespan:
                        raise AssertionError(f"{app} @{gpus}: delta {got.makespan} != full "
                                             f"{fresh.makespan} after changing {op.name}")
        finally:
            gc.unfreeze()
    # The mean, so that the periodic collections count; the median beside it.
    delta = statistics.mean(deltas)
    rebuild = statistics.median(rebuilt) if rebuilt else None
    return {"nodes": len(graph), "build_s": build, "full_sim_s": sim, "delta_s": delta,
            "delta_median_s": statistics.median(deltas),
            "delta_p90_s": sorted(deltas)[int(0.9 * (len(deltas) - 1))], "rebuild_s": rebuild,
            "ratio": None if rebuild is None else rebuild / delta, "paper_ratio": PAPER_RATIO[app, gpus],
            "build_us_per_node": build / len(graph) * 1e6, "session_build_s": session_build,
            "session_build_us_per_node": session_build / len(graph) * 1e6,
            "sim_us_per_node": sim / len(graph) * 1e6, "changes": changes,
            "rebuilds": rebuilds, "makespan_s": full.makespan}


def measure_search(app: str = "inception", gpus: int = 16, proposals: int = 2000) -> dict:
    """CPU seconds of the same search with and without remembered region plans (module doc)."""
    from strategy.costs import CostModel
    from strategy.costs.app_profile import load_app
    from strategy.machine_model import machine_model
    from strategy.search import search
    out = {}
    saved = os.environ.get("TASKRT_PLAN_MEMO_NODES")
    # A short search first, not counted: the process's first-use costs (imports, the
    # compiled list scheduler, meta-tensor tables) would otherwise fall on the first run.
    net = load_app(app, [], devices=gpus)
    search(net.model, machine_model(f"p100:{max(1, gpus // 4)}"), CostModel(), proposals=20,
           optimizer=net.optimizer, seed=1)
    try:
        for label, memo in (("memo", None), ("no_memo", "0")):
            if memo is None:
                os.environ.pop("TASKRT_PLAN_MEMO_NODES", None)
                if saved is not None:
                    os.environ["TASKRT_PLAN_MEMO_NODES"] = saved
            else:
                os.environ["TASKRT_PLAN_MEMO_NODES"] = memo
            net = load_app(app, [], devices=gpus)
            t = _clock()
            r = search(net.model, machine_model(f"p100:{max(1, gpus // 4)}"), CostModel(),
                       proposals=proposals, optimizer=net.optimizer, seed=0)
            out[label] = {"cpu_s": _clock() - t, "proposals": r.proposals,
                          "predicted_s": r.predicted}
    finally:
        os.environ.pop("TASKRT_PLAN_MEMO_NODES", None)
        if saved is not None:
            os.environ["TASKRT_PLAN_MEMO_NODES"] = saved
    on, off = out["memo"], out["no_memo"]
    if (on["proposals"], on["predicted_s"]) != (off["proposals"], off["predicted_s"]):
        raise AssertionError(f"search with and without the region-plan memo differ: {out}")
    out.update(app=app, gpus=gpus, ratio=off["cpu_s"] / on["cpu_s"],
               proposals_per_cpu_s=on["proposals"] / on["cpu_s"])
    return out


def run(quick: bool = False) -> dict:
    warnings.simplefilter("ignore")                  # analytic-cost fallback warnings
    gpu_counts = (4,) if quick else (4, 16, 64)
    results, rows = {}, []
    for app in APPS:
        for gpus in gpu_counts:
            big = gpus == 64
            # (3 x GC_EVERY random changes at 16 GPUs: a few changes cost 10-30x the median,
            # and a search's rate is one over the mean)
            r = measure(app, gpus, quick, changes=4 if quick else (16 if big else 3 * GC_EVERY),
                        rebuilds=1 if quick or big else 2)
            results[f"{app}@{gpus}"] = r
            print(f"  {app} @{gpus}: {r['nodes']} nodes, build {r['build_s']:.2f} s, delta "
                  f"{r['delta_s']:.3f} s, rebuild {r['rebuild_s']:.2f} s", file=sys.stderr)
            rows.append((f"{app} @{gpus} GPUs: {r['nodes']} nodes",
                         f"build {r['build_s']:.3f} s + full sim {r['full_sim_s']:.3f} s; "
                         f"delta {r['delta_s']:.3f} s (mean of {r['changes']}; median "
                         f"{r['delta_median_s']:.3f}, p90 {r['delta_p90_s']:.3f}) vs rebuild "
                         f"{r['rebuild_s']:.3f} s",
                         f"full/delta {r['ratio']:.1f}x (paper {r['paper_ratio']:.1f}x); "
                         f"build {r['build_us_per_node']:.0f} + sim "
                         f"{r['sim_us_per_node']:.1f} us/node; a search's session build "
                         f"(replannable plan + delta tables) {r['session_build_s']:.3f} s = "
                         f"{r['session_build_us_per_node']:.0f} us/node; process CPU seconds"))
    gpus = 4 if quick else 16
    inc = results[f"inception@{gpus}"]
    total = inc["build_s"] + inc["full_sim_s"]
    rows.append((f"inception @{gpus} GPUs: build + full simulation", f"{total:.3f} s",
                 "process CPU seconds; target <= 0.1 s at 16 GPUs, paper size"))
    results["inception_build_plus_sim_s"] = total
    for app in APPS:
        r = results[f"{app}@{gpus}"]
        rows.append((f"{app} @{gpus} GPUs: search proposals per second (one delta each)",
                     f"{1 / r['delta_s']:.1f}", "target >= 100 (a proposal in <= 10 ms)"))
    results["search"] = srch = measure_search(gpus=gpus, proposals=60 if quick else 2000)
    rows.append((f"search of inception @{gpus} GPUs, {srch['memo']['proposals']} proposals "
                 "(seed 0, session builds included)",
                 f"{srch['memo']['cpu_s']:.1f} s CPU with remembered region plans, "
                 f"{srch['no_memo']['cpu_s']:.1f} s without: {srch['ratio']:.2f}x",
                 f"{srch['proposals_per_cpu_s']:.1f} proposals per CPU second; same result "
                 "both ways; taking turns in one run"))
    if not quick:
        results["gpt"] = gpt = measure_gpt()
        rows.append(("GPT-3 2.7B shape, 128 simulated H100s, data parallel: `apps/transformer.py "
                     "--simulate`", f"{gpt['wall_s']:.1f} s wall, {gpt['cpu_s']:.1f} s CPU, "
                     f"peak RSS {gpt['peak_rss_gb']:.2f} GB (the first run, compiling the "
                     f"project's bytecode: {gpt['first_wall_s']:.1f} s wall)",
                     "target <= 3 s / <= 2 GB; whole process, torch import included"))
    return {"title": "simulator speed", "results": results, "rows": rows}


GPT_FLAGS = ["--layers", "32", "--width", "2560", "--heads", "32", "--seq-len", "2048",
             "--vocab", "51200", "--batch-size", "128"]


def measure_gpt(machine: str = "dgx-h100:16") -> dict:
    """Wall time and peak RSS of `apps/transformer.py --simulate` in a process of its own, as
    a user's later runs see it: run twice with Python's bytecode cache on (this project's
    machines set PYTHONDONTWRITEBYTECODE, which would make every run compile the project's
    ~300 modules from source; a user's Python writes their .pyc once), the second reported,
    the first beside it (first_wall_s)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    first = _run_gpt(machine, env)
    out = _run_gpt(machine, env)
    out["first_wall_s"] = first["wall_s"]
    return out


def _run_gpt(machine: str, env: dict) -> dict:
    """One run of measure_gpt's. The peak is the child's own high-water mark (VmHWM,
    polled): getrusage's figure for children also counts the bench process's pages that the
    child held between fork and exec."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryFile("w+") as err:
        t = time.perf_counter()
        child = subprocess.Popen([sys.executable, os.path.join(root, "apps", "transformer.py"),
                                  "--simulate", "--machine", machine, *GPT_FLAGS],
                                 stdout=subprocess.DEVNULL, stderr=err, cwd=root, env=env)
        peak_kb = 0
        while child.poll() is None:
            peak_kb = max(peak_kb, _high_water_kb(child.pid))
            time.sleep(0.1)
        wall = time.perf_counter() - t
        if child.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"apps/transformer.py --simulate failed:\n{err.read()[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - used.ru_utime) + (after.ru_stime - used.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "peak_rss_gb": peak_kb / 2 ** 20,
            "machine": machine}


def _high_water_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0
