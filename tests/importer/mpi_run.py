"""Run under mpirun: import each test net, train it under its mixed strategy over all ranks,
write the weights back, and record per rank the losses and the written-back state dict.

    mpirun -np 2 python -m mpi4py tests/importer/mpi_run.py OUT_DIR
"""
import json
import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

import torch  # noqa: E402
from mpi4py import MPI  # noqa: E402

from nets import NETS, gpt2, gpt2_strategies  # noqa: E402
from parallel_ops import SGD  # noqa: E402
from parallel_ops.importer import import_module  # noqa: E402
from taskrt.discovery import discover_machine  # noqa: E402


def main():
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    out_dir = sys.argv[1]
    rank = MPI.COMM_WORLD.Get_rank()
    machine = discover_machine()
    cases = {name: (build(), strategies(len(machine))["mixed"])
             for name, (build, strategies) in NETS.items()}
    built = gpt2()
    if built is not None:
        cases["gpt2"] = (built, gpt2_strategies(len(machine))["mixed"])
    results = {}
    for name, ((module, inputs, labels), strategy) in cases.items():
        imp = import_module(module, inputs)
        imp.add_cross_entropy()
        trainer = imp.model.compile(machine, strategy, SGD(lr=0.1, momentum=0.9))
        feeds = imp.feeds(*inputs, labels=labels)
        losses = [trainer.step(feeds) for _ in range(2)]
        imp.write_back(trainer)                      # collective: every rank
        results[name] = {"losses": losses, "method": imp.method,
                         "state": {k: v.tolist() for k, v in module.state_dict().items()}}
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
