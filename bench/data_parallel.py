"""Data parallelism over MPI ranks on this machine.

- ours vs torch DistributedDataParallel (gloo) on 2 ranks: the same CNN, global batch and
  weights (target: ratio at most 1.0);
- scaling: 1 vs 2 ranks at a fixed per-rank batch, and the time a rank waits on messages per
  iteration (executor.wait_s: the progress loop had nothing to run).
Each configuration is an mpirun job of its own (bench/_dist_worker.py); the jobs take turns
in blocks of iterations (bench._common.alternating_mpi), as runtime_overhead alternates its
processes: in one process, running both models interleaved moved the ratio by 2-5%.
"""
from __future__ import annotations

import statistics

from bench._common import alternating_mpi


def run(quick: bool = False) -> dict:
    per_rank, blocks, per_block = (4, 1, 2) if quick else (16, 12, 3)
    script, pr = "_dist_worker.py", str(per_rank)
    rows = alternating_mpi({"ours": (2, script, [pr, "ours"]), "ddp": (2, script, [pr, "ddp"]),
                            "one_rank": (1, script, [pr, "ours"])}, blocks, per_block)
    t = {name: statistics.median(r[0] for r in got) for name, got in rows.items()}
    wait = statistics.median(r[1] for r in rows["ours"])
    ratio = t["ours"] / t["ddp"]
    speedup = (2 * per_rank / t["ours"]) / (per_rank / t["one_rank"])
    table = [
        ("2 ranks: ours / torch DDP (gloo)", f"{ratio:.2f}x",
         f"{1e3 * t['ours']:.0f} vs {1e3 * t['ddp']:.0f} ms per iteration, batch "
         f"{2 * per_rank}, each an mpirun job of its own, taking turns; target <= 1.0"),
        ("scaling 1 -> 2 ranks, fixed per-rank batch", f"{speedup:.2f}x samples/s",
         f"{1e3 * t['one_rank']:.0f} ms (1 rank) vs {1e3 * t['ours']:.0f} ms (2 ranks); "
         f"2 ranks on 2 cores"),
        ("waiting on messages per iteration (2 ranks)", f"{1e3 * wait:.1f} ms",
         f"{100 * wait / t['ours']:.0f}% of the iteration"),
    ]
    return {"title": "data parallel over MPI", "rows": table,
            "data": {"seconds": t, "wait_s": wait, "ratio": ratio, "speedup": speedup,
                     "per_rank_batch": per_rank, "iterations": rows}}
