"""Runtime demo: train a small MLP classifier under any number of MPI ranks.

    mpirun -np 2 python -m mpi4py apps/demo.py            # 2 ranks, one CPU device each
    python apps/demo.py --devices 4                        # one process, 4 logical devices

The strategy mixes the SOAP kinds: the first layer is data parallel, the second splits its
input features (partial sums, all-reduced), the classifier splits output features, and the
loss splits the classes. Rank 0 prints the strategy, then per step the loss and time, and at
the end samples/s; the graph's copies and all-reduces are what moves data between ranks.
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

from taskrt import Machine
from taskrt.discovery import discover_machine, launched_by_mpi
from parallel_ops import SGD, Model, ParallelConfig


def build(batch: int, features: int, hidden: int, classes: int) -> Model:
    m = Model("mlp_demo", seed=0)
    x = m.input("x", (batch, features))
    y = m.input("y", (batch,), dtype="int64")
    h = m.linear(x, hidden, name="fc1")
    h = m.linear(h, hidden, name="fc2")
    logits = m.linear(h, classes, name="classifier")
    m.softmax_cross_entropy(logits, y, name="loss")
    return m


def strategy(n: int) -> dict:
    devs = list(range(n))
    return {"fc1": ParallelConfig.of(devs, n=n),
            "fc2": ParallelConfig.of(devs, i=n),
            "classifier": ParallelConfig.of(devs, o=n),
            "loss": ParallelConfig.of(devs, c=n)}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--devices", type=int, default=1, help="logical devices (one process)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--gpu", action="store_true", help="run on CUDA (logical devices share GPUs)")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    mpi = launched_by_mpi()
    if mpi:
        machine = discover_machine(use_gpus=a.gpu)
    elif a.gpu:
        machine = Machine.local(a.devices, "cuda", num_gpus=torch.cuda.device_count())
    else:
        machine = Machine.local(a.devices)
    rank = 0
    if mpi:
        from mpi4py import MPI
        rank = MPI.COMM_WORLD.Get_rank()
    model = build(a.batch_size, 64, 256, 10)
    trainer = model.compile(machine, strategy(len(machine)), SGD(lr=0.2, momentum=0.9))
    say = print if rank == 0 else (lambda *x, **k: None)
    say(f"{machine}; torch threads per rank: {torch.get_num_threads()}")
    say(trainer.strategy_table())
    say(trainer.graph.summary())
    g = torch.Generator().manual_seed(1)
    teacher = torch.randn(64, 10, generator=g)
    times = []
    for it in range(a.iterations):
        x = torch.randn(a.batch_size, 64, generator=g)
        y = (x @ teacher).argmax(dim=1)
        t = time.perf_counter()
        loss = trainer.step({"x": x, "y": y})
        times.append(time.perf_counter() - t)
        say(f"iter {it + 1:3d}  loss {loss:.4f}  {1e3 * times[-1]:.1f} ms")
    steady = sorted(times[2:] or times)[len(times[2:] or times) // 2]
    say(f"median iteration {1e3 * steady:.1f} ms, {a.batch_size / steady:.0f} samples/s on "
        f"{len(machine)} devices")


if __name__ == "__main__":
    main()
