"""Data parallelism over MPI ranks on this machine.

- ours vs torch DistributedDataParallel (gloo) on 2 ranks: the same CNN, global batch and
  weights, iterations interleaved, each first in turn (target: ratio at most 1.0);
- scaling: 1 vs 2 ranks at a fixed per-rank batch, and the time a rank waits on messages per
  iteration (executor.wait_s: the progress loop had nothing to run).
Both run under a real mpirun (bench/_dist_worker.py).
"""
from __future__ import annotations

from bench._common import run_mpi_worker


def run(quick: bool = False) -> dict:
    per_rank, iters = (4, 2) if quick else (16, 20)
    ddp = run_mpi_worker(2, "_dist_worker.py", [str(per_rank), str(iters), "ddp"])
    one = run_mpi_worker(1, "_dist_worker.py", [str(per_rank), str(iters)])
    two = run_mpi_worker(2, "_dist_worker.py", [str(per_rank), str(iters)])
    ratio = ddp["ours"] / ddp["ddp"]
    speedup = (2 * per_rank / two["ours"]) / (per_rank / one["ours"])
    rows = [
        ("2 ranks: ours / torch DDP (gloo)", f"{ratio:.2f}x",
         f"{1e3 * ddp['ours']:.0f} vs {1e3 * ddp['ddp']:.0f} ms per iteration, batch "
         f"{2 * per_rank}; target <= 1.0"),
        ("scaling 1 -> 2 ranks, fixed per-rank batch", f"{speedup:.2f}x samples/s",
         f"{1e3 * one['ours']:.0f} ms (1 rank) vs {1e3 * two['ours']:.0f} ms (2 ranks); "
         f"2 ranks on 2 cores"),
        ("waiting on messages per iteration (2 ranks)", f"{1e3 * two['wait_s']:.1f} ms",
         f"{100 * two['wait_s'] / two['ours']:.0f}% of the iteration"),
    ]
    return {"title": "data parallel over MPI", "rows": rows,
            "data": {"ddp": ddp, "one_rank": one, "two_ranks": two}}
