"""Run under mpirun: every app under data parallelism and its mixed strategy at the fixed
test configuration (app_cases), and one app through the full command line (main) with
--json, --export and --trace. Rank 0 writes <out>/<app>-<strategy>.pt and main's output
to <out>/main.rank<r>.txt; the pytest side (test_apps.py) compares.

    mpirun -np 2 python -m mpi4py tests/apps/mpi_apps.py OUT_DIR [app ...]
"""
import contextlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from mpi4py import MPI  # noqa: E402

from app_cases import STRATEGIES, app_module, run_case, save_result  # noqa: E402
from apps import APPS  # noqa: E402
from apps.common import main  # noqa: E402


def run_main(out_dir: str, rank: int) -> None:
    argv = ["--small", "--batch-size", "4", "--iterations", "2", "--warmup", "1", "--json",
            "--export", os.path.join(out_dir, "exported.msgpack"),
            "--trace", os.path.join(out_dir, "trace.json")]
    with open(os.path.join(out_dir, f"main.rank{rank}.txt"), "w") as f, \
            contextlib.redirect_stdout(f):
        code = main(app_module("transformer").APP, argv)
        print(f"exit {code}")


def main_runner():
    out_dir = sys.argv[1]
    names = sys.argv[2:] or list(APPS)
    rank = MPI.COMM_WORLD.Get_rank()
    for name in names:
        for strategy in STRATEGIES:
            res, weights = run_case(name, strategy, out_dir)
            if rank == 0:
                save_result(os.path.join(out_dir, f"{name}-{strategy}.pt"), res, weights)
    run_main(out_dir, rank)


if __name__ == "__main__":
    main_runner()
