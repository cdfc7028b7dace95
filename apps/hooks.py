"""Where the simulator (strategy/simulator, issue 6) and the search (strategy/search,
issue 7) plug into the command line: --machine, --simulate and --search. Until they are
built, each hook refuses its flag with a UsageError that says what to do instead.
"""
from __future__ import annotations

import argparse

from .app import App
from .errors import UsageError


def machine_model(spec: str):
    """The machine model named by --machine (a preset or a file). Needs issue 6."""
    raise UsageError(f"--machine {spec}: machine models (presets such as the paper's P100 and "
                     "K80 clusters, or a machine file) come with the simulator "
                     "(strategy/simulator, issue 6), which is not built yet. Leave out "
                     "--machine to train on the machine this job runs on.")


def search_strategy(app: App, a: argparse.Namespace):
    """The strategy found by --search SECONDS. Needs issue 7."""
    raise UsageError(f"--search {a.search:g}: the strategy search (strategy/search, issue 7) "
                     "is not built yet. Leave out --search to train with data parallelism, "
                     "or pass a strategy file with --strategy FILE.")


def simulate_run(app: App, a: argparse.Namespace):
    """The predicted iteration of --simulate. Needs issue 6."""
    raise UsageError("--simulate: the simulator (strategy/simulator, issue 6) is not built "
                     "yet, so nothing can be predicted. Leave out --simulate to measure a real "
                     "run instead.")
