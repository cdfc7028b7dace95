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

import sys
import time
import warnings

# config, tensor-parallel degree, GPUs, global batch, published TFLOP/s per GPU
ROWS = [("1.7b", 1, 32, 512, 137), ("7.5b", 4, 128, 512, 142), ("3.6b", 2, 64, 512, 138),
        ("18b", 8, 256, 1024, 135)]
QUICK_ROWS = [("1.7b", 1, 8, 16, 137)]


def predict_row(config: str, t: int, gpus: int, batch: int, recompute: str = "full"):
    """The Prediction of Megatron's strategy for one row on selene:gpus/8."""
    from dataclasses import replace

    from apps.gpt import APP
    from apps.simulate import predict
    from apps.startup import optimizer, setup
    from strategy.experts import megatron
    argv = ["--config", config, "--machine", f"selene:{gpus // 8}", "--batch-size",
            str(batch), "--dtype", "bfloat16", "--optimizer", "adam", "--recompute", recompute,
            "--simulate"]
    s = setup(APP, argv)
    strategy = megatron(s.network.model, len(s.machine), 8, tensor_parallel=t)
    return predict(APP, replace(s, strategy=strategy, strategy_name=f"megatron t={t}"),
                   optimizer(s.config))


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
        results[f"{config}@{gpus}"] = r
        print(f"  {config} t={t} {gpus} GPUs: {r['tflops_per_gpu']} TFLOP/s, "
              f"{mem / 1e9:.1f} GB, {wall:.0f} s", file=sys.stderr)
        rows.append((f"GPT {config}, Megatron t={t}, {gpus} simulated A100 (selene), batch "
                     f"{batch}, bf16 + Adam",
                     f"{r['tflops_per_gpu'] or 0:.1f} TFLOP/s per GPU ({r['ratio']:.2f}x "
                     f"published {published}); {r['iteration_s']:.3f} s/iteration; peak "
                     f"{mem / 1e9:.1f} GB per GPU",
                     "target within 15% of published (issue 20); analytic costs, full "
                     f"recomputation; simulated in {wall:.0f} s"))
    return {"title": "large language models", "results": results, "rows": rows}
