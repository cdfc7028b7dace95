"""Worker for the multi-rank benchmarks, run under mpirun by bench/data_parallel.py.

    mpirun -np N python -m mpi4py bench/_dist_worker.py PER_RANK_BATCH ITERS [ddp]

Trains the benchmark CNN data parallel over all ranks with this project's runtime and, with
`ddp`, also with torch DistributedDataParallel (gloo) on the same model, batch and ranks,
iterations interleaved, each going first every other iteration (in one fixed order, the
ratio moved by up to 5% with the order). Rank 0 prints one JSON object as its last line.
"""
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from mpi4py import MPI  # noqa: E402

from bench.runtime_overhead import SHAPES, eager, ours  # noqa: E402
from taskrt.discovery import discover_machine  # noqa: E402

CONFIG = "large layers (3 convs of 64-128 channels, 32x32)"


def main():
    per_rank, iters = int(sys.argv[1]), int(sys.argv[2])
    with_ddp = "ddp" in sys.argv[3:]
    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    _, cin, hw, layers, classes = SHAPES[CONFIG]
    batch = per_rank * size
    machine = discover_machine(use_gpus=False)
    trainer = ours(batch, cin, hw, layers, classes, "cpu", machine)
    g = torch.Generator().manual_seed(0)
    xv = torch.randn(batch, cin, hw, hw, generator=g)
    yv = torch.randint(0, classes, (batch,), generator=g)
    steps = {"ours": lambda: trainer.step({"x": xv, "y": yv})}
    if with_ddp:
        import torch.distributed as dist
        port = comm.bcast(29500 + os.getpid() % 1000 if rank == 0 else None, root=0)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=size)
        net, _ = eager(batch, cin, hw, layers, classes, "cpu")
        ddp = torch.nn.parallel.DistributedDataParallel(net)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9, foreach=False)
        mine = slice(rank * per_rank, (rank + 1) * per_rank)

        def step_ddp():
            opt.zero_grad()
            F.cross_entropy(ddp(xv[mine]), yv[mine]).backward()
            opt.step()
        steps["ddp"] = step_ddp
    times = {k: [] for k in steps}
    waits = []
    for it in range(iters + 2):
        order = list(steps.items())
        for k, f in (order if it % 2 == 0 else order[::-1]):
            comm.Barrier()
            t = time.perf_counter()
            f()
            dt = comm.allreduce(time.perf_counter() - t, op=MPI.MAX)
            if it >= 2:
                times[k].append(dt)
                if k == "ours" and size > 1:
                    waits.append(comm.allreduce(trainer.executor.wait_s, op=MPI.MAX))
    if rank == 0:
        out = {k: statistics.median(v) for k, v in times.items()}
        out["wait_s"] = statistics.median(waits) if waits else 0.0
        out["ranks"], out["per_rank_batch"] = size, per_rank
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
