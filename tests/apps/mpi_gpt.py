"""Run under mpirun -np 2: the --small GPT (float64) trained with Megatron's strategy (t=2, a
strategy file) and full activation recomputation, and with a strategy searched in the same
command (--search, with its choice of recomputation). Rank 0 writes <out>/gpt-<case>.pt
(losses, weights, the recomputed operators); test_gpt_mpi.py compares them with one device.

    mpirun -np 2 python -m mpi4py tests/apps/mpi_gpt.py OUT_DIR MEGATRON_FILE
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

import torch  # noqa: E402
from mpi4py import MPI  # noqa: E402

from apps.common import run  # noqa: E402
from apps.gpt import APP  # noqa: E402

ARGV = ["--small", "--batch-size", "8", "--iterations", "2", "--warmup", "0", "--dtype",
        "float64", "--quiet"]
CASES = {"megatron": ["--recompute", "full", "--strategy"],
         "searched": ["--search", "4", "--search-proposals", "40"]}


def main():
    out_dir, megatron_file = sys.argv[1], sys.argv[2]
    for case, extra in CASES.items():
        argv = ARGV + extra + ([megatron_file] if extra[-1] == "--strategy" else [])
        res = run(APP, argv, out=None)
        weights = {k: v.clone() for k, v in res.trainer.weights().items()}
        if MPI.COMM_WORLD.Get_rank() == 0:
            torch.save({"losses": res.losses, "weights": weights,
                        "recompute": sorted(res.trainer.model.recompute)},
                       os.path.join(out_dir, f"gpt-{case}.pt"))


if __name__ == "__main__":
    main()
