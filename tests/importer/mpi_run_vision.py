"""Run under mpirun: import each vision model (plain torch; timm's too where timm imports),
train it under data parallel and the two model-parallel strategies of vision_nets over
all ranks, write the weights back, and record per rank the losses and the state dict.

    mpirun -np 2 python -m mpi4py tests/importer/mpi_run_vision.py OUT_DIR
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

from vision_nets import MODELS, SOURCES, STRATEGIES, TIMM_SKIP, build, strategy  # noqa: E402
from parallel_ops import SGD  # noqa: E402
from parallel_ops.importer import import_module  # noqa: E402
from taskrt.discovery import discover_machine  # noqa: E402


def main():
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    out_dir = sys.argv[1]
    rank = MPI.COMM_WORLD.Get_rank()
    machine = discover_machine()
    devices = list(range(len(machine)))
    results = {}
    for source in SOURCES:
        if source == "timm" and TIMM_SKIP:
            continue
        for name in MODELS:
            for kind in STRATEGIES:
                module, inputs, labels = build(name, source)
                imp = import_module(module, inputs)
                imp.add_cross_entropy()
                trainer = imp.model.compile(machine, strategy(imp.model, kind, devices),
                                            SGD(lr=0.05, momentum=0.9))
                feeds = imp.feeds(*inputs, labels=labels)
                losses = [trainer.step(feeds) for _ in range(2)]
                imp.write_back(trainer)                      # collective: every rank
                results[f"{source}/{name}/{kind}"] = {
                    "losses": losses,
                    "state": {k: v.tolist() for k, v in module.state_dict().items()}}
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
