"""Run under mpirun -np 2: calibrate the local machine, as test_machine_model.py checks.

    mpirun -np 2 python -m mpi4py tests/strategy/mpi_machine.py OUT_DIR

Every rank writes OUT_DIR/rank<r>.json (its model's file object and the calibration's wall
time); rank 0 also saves the model as OUT_DIR/local.json and OUT_DIR/local.msgpack.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402
from mpi4py import MPI  # noqa: E402

from strategy.machines import calibrate_local, to_dict  # noqa: E402


def main():
    torch.set_num_threads(1)
    out = sys.argv[1]
    rank = MPI.COMM_WORLD.Get_rank()
    start = time.perf_counter()
    model = calibrate_local()
    seconds = time.perf_counter() - start
    if rank == 0:
        model.save(os.path.join(out, "local.json"))
        model.save(os.path.join(out, "local.msgpack"))
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"model": to_dict(model), "seconds": seconds, "str": str(model),
                   "allreduce_2": model.allreduce_time(1 << 22, [0, 1])}, f)


if __name__ == "__main__":
    main()
