"""Run under mpirun by test_period.py: one app run with the given flags; every rank writes
its Result's timing (period, the marks around the timed iterations, per-iteration times,
its speed reference) to OUT/rank<r>.json.

    mpirun -np 2 python -m mpi4py tests/apps/mpi_period.py OUT APP [flag ...]
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from mpi4py import MPI  # noqa: E402

from apps.common import run  # noqa: E402
from strategy.workload import load_workload  # noqa: E402


if __name__ == "__main__":
    out, app, flags = sys.argv[1], sys.argv[2], sys.argv[3:]
    res = run(load_workload(app), flags, out=None)
    rank = MPI.COMM_WORLD.Get_rank()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"period_s": res.period_s, "timed_from": res.timed_from,
                   "timed_to": res.timed_to, "besides_s": res.besides_s, "times": res.times,
                   "traced_s": res.traced_s, "speed_reference": res.speed_reference}, f)
