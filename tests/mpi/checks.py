"""Run under mpirun: train each model under each strategy over all ranks and record, per
rank, the losses, weights and gradients, plus the messages this rank sent and the graph's
copy nodes it should have sent. Writes <out>/rank<r>.json; the pytest side compares.

    mpirun -np 2 python -m mpi4py tests/mpi/checks.py OUT_DIR [model ...]
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

import torch  # noqa: E402
from mpi4py import MPI  # noqa: E402

from parallel_ops import SGD  # noqa: E402
from taskrt.discovery import discover_machine  # noqa: E402
from models import MODELS  # noqa: E402


def main():
    torch.set_num_threads(1)
    out_dir = sys.argv[1]
    names = sys.argv[2:] or list(MODELS)
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    machine = discover_machine()
    results = {}
    for name in names:
        build, strategies = MODELS[name]
        for sname, strategy in strategies(len(machine)).items():
            model, feeds = build()
            # Temporaries are freed as in any run; the gradients read below are kept.
            grads_read = [t.grad_name for t in model.weights + model.inputs if t.requires_grad]
            trainer = model.compile(machine, strategy, SGD(lr=0.1, momentum=0.9),
                                    keep=grads_read)
            losses = [trainer.step(feeds) for _ in range(2)]
            weights = {w.name: trainer.weight(w.name).tolist() for w in model.weights}
            grads = {w.name: trainer.read(w.grad_name).tolist() for w in model.weights
                     if w.grad_name in trainer.graph.regions}
            for t in model.inputs:
                if t.requires_grad:
                    grads[t.name] = trainer.read(t.grad_name).tolist()
            devs = machine.devices
            expected = sorted((n.id, devs[n.dst].rank, n.nbytes) for n in trainer.graph.copies()
                              if devs[n.src].rank == rank and devs[n.dst].rank != rank)
            traced = []
            if any(devs[n.src].rank != devs[n.dst].rank for n in trainer.graph.copies()):
                # copies between ranks (on every rank alike: compiling is collective)
                model, feeds = build()
                tracer = model.compile(machine, strategy, SGD(lr=0.1, momentum=0.9),
                                       record_trace=True)
                tracer.step(feeds)
                traced = [[e.node for e in tracer.executor.trace],
                          sorted(tracer.executor.sched.roles)]
            results[f"{name}/{sname}"] = {
                "traced": traced,
                "losses": losses, "weights": weights, "grads": grads,
                "strategy": {k: str(v) for k, v in strategy.items()},
                "sent": sorted(list(s) for s in trainer.executor.sent),
                "expected_sent": [list(e) for e in expected],
                "batched": trainer.executor.batched,
            }
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
