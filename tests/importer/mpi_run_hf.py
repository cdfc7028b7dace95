"""Run under mpirun: import each HF test model as its users call it, train it under data
parallel and two model-parallel strategies over all ranks, write the weights back, and
record per rank the losses and the written-back state dict.

    mpirun -np 2 python -m mpi4py tests/importer/mpi_run_hf.py OUT_DIR
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

from hf_models import CASES_MPI, HF_MODELS  # noqa: E402
from parallel_ops import SGD  # noqa: E402
from parallel_ops.importer import import_module  # noqa: E402
from taskrt.discovery import discover_machine  # noqa: E402


def main():
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    out_dir = sys.argv[1]
    rank = MPI.COMM_WORLD.Get_rank()
    machine = discover_machine()
    results = {}
    for name, attn, strategy in CASES_MPI:
        build, strategies = HF_MODELS[name]
        module, inputs = build(attn=attn)
        imp = import_module(module, inputs, method="export")
        trainer = imp.model.compile(machine, strategies(len(machine))[strategy],
                                    SGD(lr=0.1, momentum=0.9))
        losses = [trainer.step(imp.feeds(**inputs)) for _ in range(2)]
        imp.write_back(trainer)                      # collective: every rank
        results[f"{name}-{attn}-{strategy}"] = {
            "losses": losses, "state": {k: v.tolist() for k, v in module.state_dict().items()}}
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
