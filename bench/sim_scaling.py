"""How the simulator's cost grows with the GPU count and the depth: a GPT of GPT-3 2.7B's widths
(width 2560, 32 heads, sequence 2048, vocabulary 51,200) at 256, 1,024 and 4,096 simulated H100s
(DGX-H100 nodes of 8), data parallel and Megatron's tensor parallelism (t=8 within a node, data
parallelism across), bf16 + Adam, analytic costs, one sequence per GPU.

Two ways of building and simulating a graph, each point in a process of its own, measured as
process CPU seconds (the machine is shared; wall time would count other processes):
  session  the search's SimulationSession (lowering, planning, cost keys, full simulation;
           kept for delta simulation), built twice: the first build also counts each new cost
           key's FLOPs on meta tensors and imports numba and torch._dynamo (start-up), the
           second is the per-node cost a search's later builds pay. Depth cut to 2 blocks so
           that 4,096 GPUs fit this 2-core, 24 GB machine (a block's launches are the same at
           every depth: the 32-block model has ~16x the nodes).
  predict  what `--simulate` does (apps/simulate.py predict: lower, plan, simulate once; no
           delta tables, about half the memory per node), once, start-up included, at 2, 8,
           16 and 32 blocks on 1,024 GPUs: the 32-block GPT-3 2.7B itself (the issue's
           target: <= 10 s, <= 8 GB) under data parallelism (1M nodes, 2.6 GB) and under
           Megatron's strategy (2.6M nodes, ~4 GB). (Where the deepest point of a strategy is
           not run, a row extrapolates it from the deepest two: nodes, CPU and memory grow
           linearly with the blocks; the dp rows show it.) And at full depth on 256 and 4,096
           GPUs, for how a full model's cost per node and memory grow with the GPUs
           (Megatron @4,096: 10.5M nodes, ~8 GB).
Peak RSS is the process's VmHWM, with the model and torch loaded first (their share is the
baseline). Reported per point: nodes, CPU seconds, us per node, peak RSS and KB per node
above the baseline.

    python -m bench sim_scaling
    python -m bench.sim_scaling dp 1024 32 predict     # one point, as JSON
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LAYERS = 2
# (strategy, GPUs, blocks, path)
POINTS = [("dp", 256, LAYERS, "session"), ("dp", 1024, LAYERS, "session"),
          ("dp", 4096, LAYERS, "session"), ("megatron", 256, LAYERS, "session"),
          ("megatron", 1024, LAYERS, "session"), ("dp", 1024, LAYERS, "predict"),
          ("megatron", 1024, LAYERS, "predict"), ("dp", 1024, 8, "predict"),
          ("megatron", 1024, 8, "predict"), ("dp", 1024, 16, "predict"),
          ("dp", 1024, 32, "predict"), ("megatron", 1024, 32, "predict"),
          ("dp", 256, 32, "predict"), ("megatron", 256, 32, "predict"),
          ("dp", 4096, 32, "predict"), ("megatron", 4096, 32, "predict")]
FULL_DEPTH = 32
QUICK_POINTS = [("dp", 8, LAYERS, "session"), ("dp", 16, LAYERS, "session"),
                ("dp", 16, 4, "predict")]
PER_GPU_BATCH = 1


def _rss_kb(field: str = "VmHWM") -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def measure_point(kind: str, gpus: int, layers: int = LAYERS, path: str = "session") -> dict:
    """One point, in this process (run it in a fresh one: see module doc)."""
    import gc
    import time
    import warnings
    warnings.simplefilter("ignore")
    from dataclasses import replace
    from apps.gpt import APP
    from apps.simulate import cost_model, predict
    from apps.startup import optimizer, setup
    from strategy.delta import SimulationSession
    from strategy.experts import megatron
    s = setup(APP, ["--config", "gpt3-2.7b", "--layers", str(layers), "--machine",
                    f"dgx-h100:{gpus // 8}", "--batch-size", str(PER_GPU_BATCH * gpus),
                    "--dtype", "bfloat16", "--optimizer", "adam", "--simulate", "--quiet"])
    model = s.network.model
    strategy = None if kind == "dp" else megatron(model, gpus, 8, tensor_parallel=8)
    base_kb = _rss_kb("VmRSS")
    first = None
    if path == "predict":
        s = replace(s, strategy=strategy or {}, strategy_name=kind)
        t = time.process_time()
        result = predict(APP, s, optimizer(s.config)).result
        cpu = time.process_time() - t
    else:
        costs = cost_model(s.config, s.network)
        t = time.process_time()
        session = SimulationSession(model, s.machine_model, costs, strategy,
                                    optimizer(s.config))
        first = time.process_time() - t
        del session
        gc.collect()
        t = time.process_time()          # again: cost keys known, imports done
        session = SimulationSession(model, s.machine_model, costs, strategy,
                                    optimizer(s.config))
        cpu = time.process_time() - t
        result = session.result
    nodes = len(result.start)
    peak_kb = _rss_kb()
    return {"kind": kind, "gpus": gpus, "layers": layers, "path": path, "nodes": nodes,
            "cpu_s": cpu, "first_cpu_s": first,
            "us_per_node": cpu / nodes * 1e6, "peak_rss_gb": peak_kb / 2 ** 20,
            "base_rss_gb": base_kb / 2 ** 20,
            "kb_per_node": (peak_kb - base_kb) / nodes,
            "iteration_s": result.makespan, "valid": result.valid}


def _in_child(kind: str, gpus: int, layers: int, path: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "bench.sim_scaling", kind, str(gpus),
                          str(layers), path], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"sim_scaling {kind} @{gpus} x{layers} {path} failed:\n"
                           f"{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _key(r: dict) -> str:
    return f"{r['kind']}@{r['gpus']}" + ("" if (r["layers"], r["path"]) == (LAYERS, "session")
                                         else f"x{r['layers']}/{r['path']}")


def _row(r: dict) -> tuple:
    name = "data parallel" if r["kind"] == "dp" else "Megatron t=8"
    how = ("SimulationSession: build + full simulation" if r["path"] == "session" else
           "--simulate (lower, plan, simulate once; start-up included)")
    first = f"; first build {r['first_cpu_s']:.1f} s" if r["first_cpu_s"] else ""
    return (f"GPT 2.7B widths, {r['layers']} blocks, {r['gpus']} simulated H100s, {name}: "
            f"{how}",
            f"{r['nodes']:,} nodes, {r['cpu_s']:.1f} s CPU ({r['us_per_node']:.0f} us/node"
            f"{first}), peak RSS {r['peak_rss_gb']:.2f} GB",
            f"{r['kb_per_node']:.1f} KB/node over the {r['base_rss_gb']:.2f} GB of the loaded "
            "model and torch" + ("; 32 blocks: ~16x the nodes" if r["layers"] < 32 else ""))


def run(quick: bool = False, points=None) -> dict:
    results, rows = {}, []
    for kind, gpus, layers, path in points or (QUICK_POINTS if quick else POINTS):
        r = _in_child(kind, gpus, layers, path)
        results[_key(r)] = r
        print(f"  {_key(r)}: {r['nodes']} nodes, {r['cpu_s']:.1f} s CPU, "
              f"{r['us_per_node']:.0f} us/node, peak {r['peak_rss_gb']:.2f} GB",
              file=sys.stderr)
    return report(results)


def report(results: dict) -> dict:
    """The benchmark's entry (title, results, rows) of measured points {key: point}."""
    # Measured points only (an entry's results also hold its extrapolations: report() may be
    # given a stored entry's results with one point run again).
    points = [r for r in results.values() if isinstance(r, dict) and "kind" in r]
    rows = [_row(r) for r in points]
    out = {k: r for k, r in results.items() if isinstance(r, dict) and "kind" in r}
    for kind in ("dp", "megatron"):
        pts = sorted((r for r in points if r["kind"] == kind and r["path"] == "session"
                      and r["layers"] == LAYERS), key=lambda r: r["gpus"])
        if len(pts) > 1:
            out[f"{kind}_growth"] = _growth_row(rows, kind, pts, "GPT 2.7B widths")
    for kind in ("dp", "megatron"):
        pts = sorted((r for r in points if r["kind"] == kind and r["path"] == "predict"
                      and r["layers"] == FULL_DEPTH), key=lambda r: r["gpus"])
        if len(pts) > 1:
            out[f"{kind}x{FULL_DEPTH}_growth"] = _growth_row(rows, kind, pts, "GPT-3 2.7B "
                                                             f"({FULL_DEPTH} blocks) --simulate")
    for kind in ("dp", "megatron"):
        for gpus in sorted({r["gpus"] for r in points}):
            deep = sorted((r for r in points if r["kind"] == kind and r["gpus"] == gpus
                           and r["path"] == "predict"), key=lambda r: r["layers"])
            if len(deep) > 1 and deep[-1]["layers"] < FULL_DEPTH:
                out[f"{kind}@{gpus}x{FULL_DEPTH}/extrapolated"] = x = _extrapolated(*deep[-2:])
                name = "data parallel" if kind == "dp" else "Megatron t=8"
                rows.append((f"GPT-3 2.7B ({FULL_DEPTH} blocks), {gpus} simulated H100s, {name}: "
                             "--simulate, EXTRAPOLATED (not run)",
                             f"~{x['nodes']:,.0f} nodes, ~{x['cpu_s']:.0f} s CPU, peak RSS "
                             f"~{x['peak_rss_gb']:.1f} GB",
                             f"linear in blocks from the measured {deep[-2]['layers']} and "
                             f"{deep[-1]['layers']} blocks; target <= 10 s, <= 8 GB"))
    return {"title": "simulator scaling", "results": out, "rows": rows}


def _growth_row(rows: list, kind: str, pts: list, what: str) -> float:
    """Append the row of how cost and memory per node grow from the fewest GPUs of `pts`
    (sorted by GPUs) to the most; return the growth of us/node."""
    lo, hi = pts[0], pts[-1]
    growth = hi["us_per_node"] / lo["us_per_node"]
    rows.append((f"{what}, {kind}: per-node cost and memory, {hi['gpus']} / {lo['gpus']} GPUs",
                 f"{growth:.2f}x us/node, {hi['kb_per_node'] / lo['kb_per_node']:.2f}x KB/node",
                 f"nodes {hi['nodes'] / lo['nodes']:.1f}x; 1.0 = linear in nodes; "
                 + ", ".join(f"{r['gpus']}: {r['nodes']:,} nodes, {r['cpu_s']:.1f} s, "
                             f"{r['us_per_node']:.1f} us, {r['kb_per_node']:.1f} KB, "
                             f"{r['peak_rss_gb']:.2f} GB" for r in pts)))
    return growth


def _extrapolated(a: dict, b: dict, layers: int = FULL_DEPTH) -> dict:
    """Nodes, CPU seconds and peak RSS at `layers` blocks, each linear in the blocks through
    the points a and b (fewer blocks first)."""
    f = (layers - b["layers"]) / (b["layers"] - a["layers"])
    return {k: b[k] + f * (b[k] - a[k]) for k in ("nodes", "cpu_s", "peak_rss_gb")}


if __name__ == "__main__":
    kind, gpus = sys.argv[1], int(sys.argv[2])
    layers = int(sys.argv[3]) if len(sys.argv) > 3 else LAYERS
    path = sys.argv[4] if len(sys.argv) > 4 else "session"
    print(json.dumps(measure_point(kind, gpus, layers, path)))
