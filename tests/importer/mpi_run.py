"""Run under mpirun: import each test net, train it under its mixed strategy over all ranks,
write the weights back, and record per rank the losses and the written-back state dict.

    mpirun -np 2 python -m mpi4py tests/importer/mpi_run.py OUT_DIR [hf|vision]

With `hf`: the Hugging Face models of hf_models.CASES_MPI on their own loss instead; with
`vision`: the vision models of vision_nets (plain torch, and timm's where timm imports) under
data parallel and its two model-parallel strategies.
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


def _record(machine, module, example, strategy, feeds_of, named_loss, lr=0.1):
    """Import, train two steps, write back (collective); losses and the module's state.
    `strategy`: configs, or a function of the imported model giving them."""
    imp = import_module(module, example)
    if named_loss:
        imp.add_cross_entropy()
    if callable(strategy):
        strategy = strategy(imp.model)
    trainer = imp.model.compile(machine, strategy, SGD(lr=lr, momentum=0.9))
    feeds = feeds_of(imp)
    losses = [trainer.step(feeds) for _ in range(2)]
    imp.write_back(trainer)                      # collective: every rank
    return {"losses": losses, "method": imp.method,
            "state": {k: v.tolist() for k, v in module.state_dict().items()}}


def _nets(machine):
    """The test nets (and a wrapped GPT-2) under their mixed strategies, a loss named."""
    cases = {name: (build(), strategies(len(machine))["mixed"])
             for name, (build, strategies) in NETS.items()}
    built = gpt2()
    if built is not None:
        cases["gpt2"] = (built, gpt2_strategies(len(machine))["mixed"])
    for name, ((module, inputs, labels), strategy) in cases.items():
        yield name, _record(machine, module, inputs, strategy,
                            lambda imp: imp.feeds(*inputs, labels=labels), True)


def _hf(machine):
    """HF models called as users call them (hf_models.CASES_MPI), on their own loss."""
    from hf_models import CASES_MPI, build_case
    for name, attn, strategy in CASES_MPI:
        module, inputs, strategies = build_case(name, attn)
        yield f"{name}-{attn}-{strategy}", _record(
            machine, module, inputs, strategies(len(machine))[strategy],
            lambda imp: imp.feeds(**inputs), False)


def _vision(machine):
    from vision_nets import MODELS, SOURCES, STRATEGIES, TIMM_SKIP, build, strategy
    devices = list(range(len(machine)))
    for source in SOURCES:
        if source == "timm" and TIMM_SKIP:
            continue
        for name in MODELS:
            for kind in STRATEGIES:
                module, inputs, labels = build(name, source)
                yield f"{source}/{name}/{kind}", _record(
                    machine, module, inputs,
                    lambda model, kind=kind: strategy(model, kind, devices),
                    lambda imp, inputs=inputs, labels=labels: imp.feeds(*inputs, labels=labels),
                    True, lr=0.05)


def main():
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    out_dir = sys.argv[1]
    rank = MPI.COMM_WORLD.Get_rank()
    machine = discover_machine()
    cases = {"hf": _hf, "vision": _vision}.get(sys.argv[2] if sys.argv[2:] else "", _nets)
    results = dict(cases(machine))
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
