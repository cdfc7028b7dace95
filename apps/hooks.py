"""Where the simulator (strategy/simulator, issue 6) and the search (strategy/search,
issue 7) plug into the command line: --machine, --simulate and --search.

--machine names a machine model (a preset, NAME:NODES, a machine file, or `local`,
calibrated now); it is for --simulate and --search only: a real run trains on the devices
the job runs on (startup.py refuses --machine there). --simulate predicts one iteration on
that model without training (apps/simulate.py). The search is not built yet: its hook
refuses --search with a UsageError that says what to do instead.
"""
from __future__ import annotations

import argparse
import sys

from .app import App
from .errors import UsageError


def machine_model(spec: str):
    """The machine model named by --machine: a preset, NAME:NODES, a file or 'local'."""
    from strategy.machines import MachineModelError
    from strategy.machines import machine_model as named_model
    try:
        return named_model(spec)
    except MachineModelError as e:
        raise UsageError(f"--machine {spec}: {e}") from None


def search_strategy(app: App, a: argparse.Namespace):
    """The strategy found by --search SECONDS. Needs issue 7."""
    raise UsageError(f"--search {a.search:g}: the strategy search (strategy/search, issue 7) "
                     "is not built yet. Leave out --search to train with data parallelism, "
                     "or pass a strategy file with --strategy FILE.")


def simulate_run(app: App, a: argparse.Namespace, machine, net, strategy: dict,
                 strategy_name: str, rank: int = 0, out=None):
    """The predicted iteration of --simulate on a.machine_model (set up by startup.py):
    prints its report on rank 0, writes --trace, and returns the Prediction."""
    from .simulate import predict, write_prediction_trace
    from .training import optimizer
    p = predict(app, a, machine, net, strategy, strategy_name, optimizer(app, a), rank)
    if rank == 0:
        if a.trace:
            write_prediction_trace(a.trace, p, getattr(a, "argv", sys.argv[1:]))
        if out is not None:
            print(p.text(), file=out, flush=True)
            if a.trace:
                print(f"simulated timeline written to {a.trace}", file=out, flush=True)
    return p
