"""How the simulator's cost grows with the GPU count: a GPT of GPT-3 2.7B's widths (width 2560,
32 heads, sequence 2048, vocabulary 51,200) at 256, 1,024 and 4,096 simulated H100s (DGX-H100
nodes of 8), data parallel and Megatron's tensor parallelism (t=8 within a node, data
parallelism across), bf16 + Adam, analytic costs. The depth is cut to LAYERS blocks so that
4,096 GPUs fit this 2-core, 24 GB machine; a block's launches are the same at every depth, so
the nodes and the cost per node scale with the depth (the 32-block model has about 16x the
nodes of the 2-block one).

Each point runs in a process of its own: build a SimulationSession (lowering, planning, cost
keys, full simulation) twice, measured as process CPU seconds (the machine is shared; wall
time would count other processes): the first build also counts each new cost key's FLOPs on
meta tensors and imports numba and torch._dynamo (start-up), the second is the per-node cost
(what a search's later builds pay). Peak RSS is the process's VmHWM, with the model and torch
loaded first (their share is the baseline). Reported per point: nodes, CPU seconds of both
builds, us per node, peak RSS and KB per node above the baseline.

    python -m bench sim_scaling
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LAYERS = 2
POINTS = [("dp", 256), ("dp", 1024), ("dp", 4096), ("megatron", 256), ("megatron", 1024)]
QUICK_POINTS = [("dp", 8), ("dp", 16)]
PER_GPU_BATCH = 1


def _rss_kb(field: str = "VmHWM") -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def measure_point(kind: str, gpus: int) -> dict:
    """One point, in this process (run it in a fresh one: see module doc)."""
    import gc
    import time
    import warnings
    warnings.simplefilter("ignore")
    from apps.gpt import APP
    from apps.simulate import cost_model
    from apps.startup import optimizer, setup
    from strategy.delta import SimulationSession
    from strategy.experts import megatron
    s = setup(APP, ["--config", "gpt3-2.7b", "--layers", str(LAYERS), "--machine",
                    f"dgx-h100:{gpus // 8}", "--batch-size", str(PER_GPU_BATCH * gpus),
                    "--dtype", "bfloat16", "--optimizer", "adam", "--simulate"])
    model = s.network.model
    strategy = None if kind == "dp" else megatron(model, gpus, 8, tensor_parallel=8)
    costs = cost_model(s.config, s.network)
    base_kb = _rss_kb("VmRSS")
    t = time.process_time()
    session = SimulationSession(model, s.machine_model, costs, strategy, optimizer(s.config))
    first = time.process_time() - t
    del session
    gc.collect()
    t = time.process_time()          # again: cost keys known, imports done
    session = SimulationSession(model, s.machine_model, costs, strategy, optimizer(s.config))
    cpu = time.process_time() - t
    nodes = len(session.result.start)
    peak_kb = _rss_kb()
    return {"kind": kind, "gpus": gpus, "layers": LAYERS, "nodes": nodes, "cpu_s": cpu,
            "first_cpu_s": first,
            "us_per_node": cpu / nodes * 1e6, "peak_rss_gb": peak_kb / 2 ** 20,
            "base_rss_gb": base_kb / 2 ** 20,
            "kb_per_node": (peak_kb - base_kb) / nodes,
            "iteration_s": session.result.makespan, "valid": session.result.valid}


def _in_child(kind: str, gpus: int) -> dict:
    out = subprocess.run([sys.executable, "-m", "bench.sim_scaling", kind, str(gpus)],
                         cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"sim_scaling {kind} @{gpus} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(quick: bool = False) -> dict:
    results, rows = {}, []
    for kind, gpus in QUICK_POINTS if quick else POINTS:
        r = _in_child(kind, gpus)
        results[f"{kind}@{gpus}"] = r
        print(f"  {kind} @{gpus}: {r['nodes']} nodes, {r['cpu_s']:.1f} s CPU, "
              f"{r['us_per_node']:.0f} us/node, peak {r['peak_rss_gb']:.2f} GB", file=sys.stderr)
        name = "data parallel" if kind == "dp" else "Megatron t=8"
        rows.append((f"GPT 2.7B widths, {LAYERS} blocks, {gpus} simulated H100s, {name}: "
                     "build + full simulation",
                     f"{r['nodes']:,} nodes, {r['cpu_s']:.1f} s CPU ({r['us_per_node']:.0f} "
                     f"us/node; first build {r['first_cpu_s']:.1f} s), peak RSS "
                     f"{r['peak_rss_gb']:.2f} GB",
                     f"{r['kb_per_node']:.1f} KB/node over the {r['base_rss_gb']:.2f} GB of "
                     "the loaded model and torch; 32 blocks: ~16x the nodes"))
    points = list(results.values())
    for kind in ("dp", "megatron"):
        pts = sorted((r for r in points if r["kind"] == kind), key=lambda r: r["gpus"])
        if len(pts) > 1:
            lo, hi = pts[0], pts[-1]
            growth = hi["us_per_node"] / lo["us_per_node"]
            results[f"{kind}_growth"] = growth
            rows.append((f"GPT 2.7B widths, {kind}: per-node cost, {hi['gpus']} / "
                         f"{lo['gpus']} GPUs", f"{growth:.2f}x",
                         f"nodes {hi['nodes'] / lo['nodes']:.1f}x; 1.0 = linear in nodes"))
    return {"title": "simulator scaling", "results": results, "rows": rows}


if __name__ == "__main__":
    print(json.dumps(measure_point(sys.argv[1], int(sys.argv[2]))))
