"""Large language models: Megatron-LM's own strategy for rows of Narayanan et al. (SC'21)
Table 1 simulated on the Selene preset, predicted TFLOP/s per GPU against the published ones.

Each row: apps/gpt.py's named config, global batch, bfloat16 mixed precision, Adam with
float32 master weights, full activation recomputation (--recompute full, as the published
runs), strategy.experts.megatron with the row's tensor-parallel degree t and data
parallelism over the rest; analytic costs (datasheet peaks, no calibration: nothing here is
fitted to a published number). FLOPs by the 96 B s l h^2 (...) count, as published. The
1.7B and 7.5B rows are the issue's anchors; 3.6B and 18.4B (the other rows of Table 1
without pipeline parallelism) were held out: run once after the method was fixed.
"""
from __future__ import annotations

import math
import sys
import time
import warnings

# config, tensor-parallel degree, GPUs, global batch, published TFLOP/s per GPU
ROWS = [("1.7b", 1, 32, 512, 137), ("7.5b", 4, 128, 512, 142), ("3.6b", 2, 64, 512, 138),
        ("18b", 8, 256, 1024, 135)]
QUICK_ROWS = [("1.7b", 1, 8, 16, 137)]
# The search against Megatron's strategy on the same machine, from data parallelism and
# random starts (no expert start): config, machine, global batch, Megatron's t, seconds,
# random starts. 7.5B on 16 A100-40GB does not fit data parallelism (16 bytes per
# parameter: 120 GB); on the loaded 2-core machine its chains make about 0.2 proposals per
# second and a session build (each start, under each of the three recomputation plans)
# takes minutes, so its random start got nowhere (2026-12-02 morning) and it has none now:
# the data-parallel chain gets the whole budget.
SEARCH_ROWS = [("7.5b", "selene:16", 512, 4, 600, 1), ("3.6b", "selene:8", 512, 2, 600, 1),
               ("18b", "selene:32", 1024, 8, 600, 1),
               ("7.5b", "dgx-a100-40gb:2", 64, 8, 600, 1),
               ("1.7b", "selene:4", 512, 1, 600, 1)]
QUICK_SEARCH_ROWS = [("1.7b", "selene:1", 16, 1, 30, 1)]


def _setup(config: str, machine: str, batch: int, recompute: str):
    from apps.gpt import APP
    from apps.startup import setup
    return setup(APP, ["--config", config, "--machine", machine, "--batch-size", str(batch),
                       "--dtype", "bfloat16", "--optimizer", "adam", "--recompute", recompute,
                       "--simulate"])


def predict_row(config: str, t: int, gpus: int, batch: int, recompute: str = "full",
                machine: str | None = None):
    """The Prediction of Megatron's strategy for one row on selene:gpus/8 (or `machine`)."""
    from dataclasses import replace

    from apps.gpt import APP
    from apps.simulate import predict
    from apps.startup import optimizer
    from strategy.experts import megatron
    s = _setup(config, machine or f"selene:{gpus // 8}", batch, recompute)
    strategy = megatron(s.network.model, len(s.machine), 8, tensor_parallel=t)
    return predict(APP, replace(s, strategy=strategy, strategy_name=f"megatron t={t}"),
                   optimizer(s.config))


def _op_of(launch_name: str, ops: dict):
    """The operator of a launch ('h0/attn/fwd', 'ln_f/normalize/bwd' -> its op)."""
    name = launch_name
    while name not in ops and "/" in name:
        name = name.rsplit("/", 1)[0]
    return ops.get(name)


def breakdown(p, device: int = 0) -> dict:
    """Where one device's predicted iteration goes: seconds its compute unit runs tasks, by
    operator type and phase (fwd, recompute, bwd, update); seconds of the copies, reductions
    and all-reduces it takes part in (inside its node, across nodes: durations summed,
    though they overlap one another and the compute), with their bytes; and how much of the
    iteration the device's compute does not cover (communication and waits exposed)."""
    from collections import Counter
    r, mm = p.result, p.machine_model
    ops = {op.name: op for op in p.network.model.ops}
    run = r.run if r.run is not None else r.start
    compute, comm, nbytes = Counter(), Counter(), Counter()
    for n in p.graph.nodes:
        seconds = float(r.end[n.id] - run[n.id])
        if n.kind == "task":
            if n.device == device:
                op = _op_of(n.launch.name, ops)
                phase = n.launch.name.rsplit("/", 1)[-1]
                compute[f"{op.type if op else n.launch.name} {phase}"] += seconds
        elif device in n.devices and not (n.kind == "copy" and n.src == n.dst):
            where = "inside a node" if len({mm.node_of(d) for d in n.devices}) == 1 \
                else "across nodes"
            key = f"{n.kind} {where}"
            comm[key] += seconds
            nbytes[key] += n.nbytes
    busy = sum(compute.values())
    return {"iteration_s": r.makespan, "compute_busy_s": busy,
            "not_covered_by_compute_s": r.makespan - busy,
            "compute_s": dict(compute.most_common()),
            "communication_s": dict(comm.most_common()),
            "communication_gb": {k: v / 1e9 for k, v in nbytes.items()}}


def breakdown_text(b: dict) -> str:
    lines = [f"iteration {b['iteration_s']:.3f} s: compute busy {b['compute_busy_s']:.3f} s, "
             f"not covered by compute {b['not_covered_by_compute_s']:.3f} s"]
    lines += [f"  {k}: {v * 1e3:.1f} ms" for k, v in b["compute_s"].items() if v > 1e-3]
    lines += [f"  {k}: {v * 1e3:.1f} ms, {b['communication_gb'][k]:.2f} GB"
              for k, v in b["communication_s"].items()]
    return "\n".join(lines)


def found_text(configs: dict, model) -> str:
    """What a strategy does, by operator type: its most common split and how many have it."""
    from collections import Counter
    by_type: dict = {}
    for op in model.ops:
        cfg = configs[op.name]
        split = ",".join(f"{n}={d}" for n, d in cfg.degrees if d > 1) or "1 device"
        by_type.setdefault(op.type, Counter())[f"[{split}] on {len(set(cfg.devices))}"] += 1
    parts = []
    for kind, counts in by_type.items():
        split, n = counts.most_common(1)[0]
        parts.append(f"{kind} {split} ({n}/{sum(counts.values())})")
    return "; ".join(parts)


def recompute_by_block(model) -> dict:
    """How many of the GPT's blocks `model.recompute` recomputes fully, selectively (its
    attention alone) or not at all."""
    from apps.gpt import recompute_segments
    on = set(model.recompute)
    out = {"full": 0, "selective": 0, "none": 0}
    for block in recompute_segments(model, "full"):
        attention = [name for name in block if model.op(name).type == "multihead_attention"]
        kind = "full" if set(block) <= on else "selective" if \
            any(name in on for name in attention) else "none"
        out[kind] += 1
    return out


def search_row(config: str, machine: str, batch: int, t: int, budget_s: float,
               random_starts: int = 1, whole_graph: bool = False,
               megatron: dict | None = None) -> dict:
    """The search (data-parallel and `random_starts` random starts, no expert; none,
    selective or full recomputation) against Megatron's strategy with full recomputation,
    on the same machine model. By default the GPT's own search (apps/gpt.py `search`: one
    block's configs tied across blocks on 1- and 2-block proxies, extrapolated to the full
    depth, strategy/tied.py), whose result is then simulated once at the full depth (the
    row's ratio is that simulation's against Megatron's full-depth simulation);
    `whole_graph`: every operator of the full graph searched (the earlier method). The
    search's summary is printed (stderr) as soon as it ends. Wall and process CPU seconds
    and the load average (1 min, at start and end) are recorded for the search."""
    import os
    from dataclasses import replace

    from apps.gpt import APP
    from apps.gpt import search as gpt_search
    from apps.simulate import cost_model, predict
    from apps.startup import optimizer
    s = _setup(config, machine, batch, "none")
    model = s.network.model
    load0, wall0, cpu0 = os.getloadavg()[0], time.perf_counter(), time.process_time()
    config_ns = replace(s.config, app_flags={**s.config.app_flags,
                                             "search_whole_graph": whole_graph})
    res = gpt_search(config_ns, s.network, s.machine_model, cost_model(s.config, s.network),
                     budget_s=budget_s, seed=0, optimizer=optimizer(s.config),
                     random_starts=random_starts)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    load1 = os.getloadavg()[0]
    blocks = recompute_by_block(model)
    print(f"search {config} on {machine} ({wall:.0f} s wall, {cpu:.0f} s CPU, load "
          f"{load0:.1f}-{load1:.1f}):\n{res.text()}\nfound: {found_text(res.configs, model)}"
          f"\nblocks recomputed: {blocks}", file=sys.stderr, flush=True)
    out = {"config": config, "machine": machine, "batch": batch, "budget_s": budget_s,
           "random_starts": random_starts, "whole_graph": whole_graph,
           "space": "full" if whole_graph else "regular",
           "capacity_gb": s.machine_model.device(0).memory_capacity / 1e9,
           "search_predicted_s": res.predicted, "megatron_t": t,
           "data_parallel_s": res.baselines.get("data_parallel"),
           "recompute": res.recompute, "recompute_blocks": blocks,
           "search_peak_memory_gb": max(res.peak_memory.values(), default=0) / 1e9,
           "proposals": res.proposals, "search_wall_s": wall, "search_cpu_s": cpu,
           "load_1min": [load0, load1], "found": found_text(res.configs, model),
           "text": res.text()}
    t0 = time.perf_counter()
    if whole_graph:
        searched_s, searched_mem = res.predicted, out["search_peak_memory_gb"]
    else:       # the found strategy simulated once at the full depth
        p = predict(APP, replace(s, strategy=res.configs, strategy_name="searched"),
                    optimizer(s.config))
        searched_s = p.result.makespan
        searched_mem = max(p.result.memory.values()) / 1e9
        out["full_depth_valid"] = p.result.valid
        out["full_depth_span_s"] = p.result.span
    out["verify_wall_s"] = time.perf_counter() - t0
    print(f"searched strategy at full depth: {searched_s:.4f} s, {searched_mem:.2f} GB "
          f"(extrapolated {res.predicted:.4f} s, {out['search_peak_memory_gb']:.2f} GB)",
          file=sys.stderr, flush=True)
    if megatron is None:
        t0 = time.perf_counter()
        mega = predict_row(config, t, 0, batch, "full", machine)
        megatron = {"megatron_s": mega.iteration_time, "megatron_wall_s":
                    time.perf_counter() - t0, "megatron_peak_memory_gb":
                    max(mega.result.memory.values()) / 1e9}
    else:
        if (megatron["config"], megatron["machine"], megatron["batch"], megatron["megatron_t"]) \
                != (config, machine, batch, t):
            raise ValueError(f"search_row: the Megatron result given is of "
                             f"{megatron['config']} on {megatron['machine']}, not {config} "
                             f"on {machine}; give the same row's.")
        megatron = {k: megatron[k] for k in ("megatron_s", "megatron_wall_s",
                                             "megatron_peak_memory_gb")}
        out["megatron_reused"] = True
    out.update(megatron)
    out.update(searched_s=searched_s, peak_memory_gb=searched_mem,
               valid=math.isfinite(searched_s),
               ratio_vs_megatron=megatron["megatron_s"] / searched_s)
    print(f"Megatron t={t}: {megatron['megatron_s']:.4f} s; searched / Megatron "
          f"{out['ratio_vs_megatron']:.3f}x", file=sys.stderr, flush=True)
    return out


def search_table_row(r: dict) -> tuple:
    """results.md's row of a search_row result."""
    method = "whole graph" if r.get("whole_graph") else \
        f"tied across blocks on 1- and 2-block proxies, {r.get('space', 'regular')} space"
    return (f"GPT {r['config']} on {r['machine']}, batch {r['batch']}: search ({method}; "
            f"data-parallel and {r['random_starts']} random start, {r['budget_s']:.0f} s) vs "
            f"Megatron t={r['megatron_t']} + full recompute, both simulated at full depth",
            f"{r['ratio_vs_megatron']:.2f}x ({r['searched_s']:.3f} s vs {r['megatron_s']:.3f} "
            f"s per iteration; the search's extrapolation {r['search_predicted_s']:.3f} s); "
            f"searched peak {r['peak_memory_gb']:.2f} GB per GPU of {r['capacity_gb']:.2f} "
            f"(extrapolated {r['search_peak_memory_gb']:.2f}; Megatron "
            f"{r['megatron_peak_memory_gb']:.1f})",
            f"target >= 1.0x and valid (issue 20); search {r['search_wall_s']:.0f} s wall, "
            f"{r['search_cpu_s']:.0f} s CPU, load {r['load_1min'][0]:.1f}-"
            f"{r['load_1min'][1]:.1f} on 2 cores; {r['proposals']} proposals; recomputation: "
            f"{r['recompute']}; found: {r['found']}")


def run(quick: bool = False) -> dict:
    warnings.simplefilter("ignore")
    results, rows = {}, []
    for config, t, gpus, batch, published in QUICK_ROWS if quick else ROWS:
        start = time.perf_counter()
        p = predict_row(config, t, gpus, batch)
        wall = time.perf_counter() - start
        mem = max(p.result.memory.values()) if p.result.memory else 0
        r = {"config": config, "t": t, "gpus": gpus, "batch": batch, "valid": p.result.valid,
             "iteration_s": p.iteration_time, "tflops_per_gpu": p.tflops_per_device,
             "published_tflops": published, "peak_memory_gb": mem / 1e9, "wall_s": wall}
        r["ratio"] = (r["tflops_per_gpu"] or 0.0) / published
        r["breakdown"] = breakdown(p)
        results[f"{config}@{gpus}"] = r
        print(f"  {config} t={t} {gpus} GPUs: {r['tflops_per_gpu']} TFLOP/s, "
              f"{mem / 1e9:.1f} GB, {wall:.0f} s\n{breakdown_text(r['breakdown'])}",
              file=sys.stderr)
        rows.append((f"GPT {config}, Megatron t={t}, {gpus} simulated A100 (selene), batch "
                     f"{batch}, bf16 + Adam",
                     f"{r['tflops_per_gpu'] or 0:.1f} TFLOP/s per GPU ({r['ratio']:.2f}x "
                     f"published {published}); {r['iteration_s']:.3f} s/iteration; peak "
                     f"{mem / 1e9:.1f} GB per GPU",
                     "target within 15% of published (issue 20); analytic costs, full "
                     f"recomputation; simulated in {wall:.0f} s"))
    for config, machine, batch, t, budget, starts in QUICK_SEARCH_ROWS if quick else \
            SEARCH_ROWS:
        r = search_row(config, machine, batch, t, budget, starts)
        results[f"search {config}@{machine}"] = r
        print(r["text"], file=sys.stderr)
        rows.append(search_table_row(r))
    return {"title": "large language models", "results": results, "rows": rows}


if __name__ == "__main__":     # one search row on its own: python -m bench.llm CONFIG MACHINE
    import json                 # BATCH T SECONDS RANDOM_STARTS OUT.json
    warnings.simplefilter("ignore")
    c, m, b, tp, secs, starts, path = sys.argv[1:8]   # [EARLIER.json: its Megatron result]
    earlier = None
    if len(sys.argv) > 8:
        with open(sys.argv[8]) as f:
            earlier = json.load(f)
    row = search_row(c, m, int(b), int(tp), float(secs), int(starts), megatron=earlier)
    with open(path, "w") as f:
        json.dump(row, f, indent=1, default=str)
