"""Run under mpirun: rank 1 fails (mode "raise") or stops (mode "stop": SIGSTOP, as a rank
stuck in a kernel or on a dead node) inside a task at iteration 2. Every rank must exit
non-zero within seconds, and the error must be shown.

    mpirun -np 2 python -m mpi4py tests/mpi/failing.py raise|stop
"""
import os
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

import torch  # noqa: E402
from mpi4py import MPI  # noqa: E402

from taskrt import IndexLaunch, Rect, Region, RegionRequirement, plan  # noqa: E402
from taskrt.privilege import R, WD  # noqa: E402
from taskrt.discovery import discover_machine  # noqa: E402
from taskrt.executor.mpi import MPIExecutor  # noqa: E402

MODE = sys.argv[1]
ITER = [0]


def produce(ctx, x, y):
    if ctx.device == 1 and ITER[0] == 2:
        if MODE == "raise":
            raise ValueError("boom in the demo task")
        os.kill(os.getpid(), signal.SIGSTOP)
    return x * 2


def consume(ctx, y, z):
    return y + 1


def main():
    machine = discover_machine()
    x, y, z = Region("x", (4,), "float32"), Region("y", (4,), "float32"), Region("z", (4,), "float32")
    halves = [Rect((0,), (2,)), Rect((2,), (4,))]
    l1 = IndexLaunch("produce", produce, (2,), lambda c: (
        RegionRequirement(x, halves[c[0]], R), RegionRequirement(y, halves[c[0]], WD)),
        devices=[0, 1])
    l2 = IndexLaunch("consume", consume, (2,), lambda c: (
        RegionRequirement(y, halves[1 - c[0]], R), RegionRequirement(z, halves[c[0]], WD)),
        devices=[0, 1])
    graph = plan([l1, l2], machine, initial={x: [(halves[0], 0), (halves[1], 1)]})
    ex = MPIExecutor(graph)
    ex.write(x, torch.arange(4.0))
    for it in range(1, 4):
        ITER[0] = it
        ex.run()
    print("finished", flush=True)


if __name__ == "__main__":
    main()
