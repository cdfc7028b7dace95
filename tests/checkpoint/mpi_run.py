"""Run under mpirun -np 2: checkpoints across rank counts and strategies, and corruption.

    mpirun -np 2 python -m mpi4py tests/checkpoint/mpi_run.py OUT_DIR IN_DIR

IN_DIR holds a checkpoint saved by one process (strategy C, 3 devices) after 2 steps.
Records per rank (OUT_DIR/rank<r>.json):
  full              4 uninterrupted steps under strategy A;
  from_one_process  IN_DIR resumed under strategy B, then steps 3 and 4;
  fallback          steps 1 and 2 saved, the newest corrupted by rank 0, resumed under B:
                    every rank falls back to step 1 and runs steps 2 to 4.
and saves OUT_DIR/saved after 2 steps under A (the pytest side resumes it in one process).
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

import torch  # noqa: E402
from mpi4py import MPI  # noqa: E402

from ckpt_model import batches, compile_  # noqa: E402
from parallel_ops import checkpoint  # noqa: E402
from taskrt.discovery import discover_machine  # noqa: E402


def record(trainer, losses):
    return {"losses": losses, "state": {k: v.tolist() for k, v in
                                        checkpoint.state_tensors(trainer).items()}}


def main():
    torch.set_num_threads(1)
    out_dir, in_dir = sys.argv[1], sys.argv[2]
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    machine = discover_machine()
    data = batches()
    results = {}

    full = compile_(machine, "A")
    results["full"] = record(full, [full.step(b) for b in data])

    first = compile_(machine, "A")
    for b in data[:2]:
        first.step(b)
    checkpoint.save_to_dir(first, os.path.join(out_dir, "saved"))

    resumed = compile_(machine, "B", seed=7)
    header = checkpoint.resume(resumed, in_dir)
    assert header["machine"]["ranks"] == 1 and header["strategy"]["conv"]["text"] == "[n=3]@0-2"
    results["from_one_process"] = record(resumed, [resumed.step(b) for b in data[2:]])

    corrupt_dir = os.path.join(out_dir, "corrupt")
    saver = compile_(machine, "A")
    for b in data[:2]:
        saver.step(b)
        checkpoint.maybe_save(saver, corrupt_dir, every=1)
    if rank == 0:
        newest = checkpoint.latest(corrupt_dir)
        with open(newest, "r+b") as f:
            f.seek(-8, os.SEEK_END)
            f.write(b"\xff" * 8)
    comm.Barrier()
    fallback = compile_(machine, "B")
    header = checkpoint.resume(fallback, corrupt_dir, out=sys.stdout)
    results["fallback"] = dict(record(fallback, [fallback.step(b) for b in data[1:]]),
                               step=header["model"]["step_count"])
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
