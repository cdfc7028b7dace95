"""Worker for the multi-rank benchmarks, run under mpirun by bench/data_parallel.py.

    mpirun -np N python -m mpi4py bench/_dist_worker.py PER_RANK_BATCH ours|ddp TURNS JOB

Trains the benchmark CNN data parallel over all ranks, with this project's runtime (`ours`)
or with torch DistributedDataParallel over gloo (`ddp`) on the same model, per-rank batch and
weights, in blocks of iterations whenever it is this job's turn (bench._common.take_turns:
the parent alternates the jobs, so that each has the machine to itself while it runs and
neither shares a process with the other). Per iteration rank 0 reports the slowest rank's
seconds and, for ours, the slowest rank's time waiting on messages.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from mpi4py import MPI  # noqa: E402

from bench._common import take_turns  # noqa: E402
from bench.runtime_overhead import SHAPES, eager, ours  # noqa: E402
from taskrt.discovery import discover_machine  # noqa: E402
from taskrt.executor.cpumemory import retain_freed_memory  # noqa: E402

CONFIG = "large layers (3 convs of 64-128 channels, 32x32)"


def main():
    per_rank, side, turns, job = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    if side not in ("ours", "ddp"):
        raise SystemExit(f"_dist_worker: side '{side}'; expected ours or ddp")
    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    _, cin, hw, layers, classes = SHAPES[CONFIG]
    batch = per_rank * size
    g = torch.Generator().manual_seed(0)
    xv = torch.randn(batch, cin, hw, hw, generator=g)
    yv = torch.randint(0, classes, (batch,), generator=g)
    if side == "ours":
        trainer = ours(batch, cin, hw, layers, classes, "cpu", discover_machine(use_gpus=False))

        def step():
            trainer.step({"x": xv, "y": yv})
            return getattr(trainer.executor, "wait_s", 0.0)     # 1 rank: no messages
    else:
        # The malloc settings our executor gives its process (as runtime_overhead's eager
        # side gets them): the ratio is then the runtime's alone.
        retain_freed_memory()
        import torch.distributed as dist
        port = comm.bcast(29500 + os.getpid() % 1000 if rank == 0 else None, root=0)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=size)
        net, _ = eager(batch, cin, hw, layers, classes, "cpu")
        ddp = torch.nn.parallel.DistributedDataParallel(net)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9, foreach=False)
        mine = slice(rank * per_rank, (rank + 1) * per_rank)

        def step():
            opt.zero_grad()
            F.cross_entropy(ddp(xv[mine]), yv[mine]).backward()
            opt.step()
            return 0.0

    def block(count: int) -> list:
        rows = []
        for _ in range(count):
            comm.Barrier()
            t = time.perf_counter()
            waited = step()
            rows.append(comm.allreduce((time.perf_counter() - t, waited), op=_MAX_PAIR))
        return rows
    step()
    take_turns(comm, turns, job, block)


def _max_pair(a, b, _datatype=None):
    return tuple(max(x, y) for x, y in zip(a, b))


_MAX_PAIR = MPI.Op.Create(_max_pair, commute=True)     # element-wise max of (seconds, wait)


if __name__ == "__main__":
    main()
