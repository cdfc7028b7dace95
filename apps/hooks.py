"""Where the simulator (strategy/simulator, issue 6) and the search (strategy/search,
issue 7) plug into the command line: --machine, --simulate and --search.

--machine names a machine model (a preset, NAME:NODES, a machine file, or `local`,
calibrated now); it is for --simulate and --search only: a real run trains on the devices
the job runs on (startup.py refuses --machine there). --simulate predicts one iteration on
that model without training (apps/simulate.py). --search SECONDS finds a strategy with the
MCMC search (strategy/search.py) and then trains with it, or predicts it with --simulate.
"""
from __future__ import annotations

import argparse
import sys
import warnings

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


def search_strategy(app: App, a: argparse.Namespace, machine, net, strategy: dict,
                    strategy_name: str, rank: int = 0, mpi: bool = False, out=None):
    """--search SECONDS: the best strategy the MCMC search (strategy/search.py) finds for
    --machine's model (with --simulate or when given), else for this job's own devices,
    calibrated (`local`, every rank takes part). Rank 0 searches, starting from data
    parallelism, the app's expert strategy and the --strategy file if any; every rank gets
    its result. Returns (configs, name) and keeps the SearchResult in a.search_result."""
    from strategy.files import from_dict
    from strategy.logical_devices import shared
    mm = a.machine_model
    if mm is None:
        mm = shared(machine_model(a.machine or "local"), a.devices_per_rank)
        if mm.num_devices != len(machine):
            raise UsageError(f"--machine {a.machine}: its model has {mm.num_devices} devices and "
                             f"this job runs on {len(machine)}; search for a machine like "
                             "this one (leave out --machine), or add --simulate.")
    a.machine_model = mm
    payload = None
    if rank == 0:
        try:
            payload = ("ok", _search(app, a, mm, machine, net, strategy, strategy_name, out))
        except UsageError as e:           # every rank must hear of it, or they wait forever
            payload = ("error", str(e))
        except Exception as e:
            payload = ("error", f"the search failed: {type(e).__name__}: {e}")
    if mpi:
        from mpi4py import MPI

        from taskrt.discovery import idle_barrier
        idle_barrier(MPI.COMM_WORLD)          # the others sleep while rank 0 searches
        payload = MPI.COMM_WORLD.bcast(payload, root=0)
    status, value = payload
    if status == "error":
        raise UsageError(f"--search {a.search:g}: {value}")
    return from_dict(value).configs, f"searched ({a.search:g} s)"


def _search(app: App, a: argparse.Namespace, mm, machine, net, strategy: dict,
            strategy_name: str, out) -> dict:
    """Rank 0's part of --search: run it, print its report, return the strategy file's
    object of the best strategy (what is broadcast to the other ranks)."""
    from strategy.files import to_dict
    from strategy.costs import CostWarning
    from strategy.experts import expert_for
    from strategy.search import search

    from .simulate import cost_model
    from .training import optimizer

    def say(*x):
        if out is not None:
            print(*x, file=out, flush=True)
    expert = expert_for(app, net.model, mm)
    opt, costs = optimizer(app, a), cost_model(a, net)

    def progress(p):
        if not a.quiet:
            say(f"  search {p['elapsed']:6.1f} s  {p['proposals']:6d} proposals "
                f"({p['rate']:.1f}/s)  from {p['candidate']:<13} current "
                f"{p['current'] * 1e3:.4g} ms  best {p['best'] * 1e3:.4g} ms")
    say(f"searching a strategy for {a.search:g} s on {mm} ...")
    with warnings.catch_warnings():      # the report says where the costs come from
        warnings.simplefilter("ignore", CostWarning)
        res = search(net.model, mm, costs, budget_s=a.search, proposals=a.search_proposals,
                     seed=a.seed, expert=expert,
                     optimizer=opt, progress=progress, progress_every=2.0,
                     starts={strategy_name: strategy} if strategy else None)
    a.search_result = res
    say(res.text())
    say(res.explain(net.model).text())
    if not a.profile:
        say(ANALYTIC_NOTE)
    return to_dict(res.configs, net.model)


# Without --profile, predicted times come from the analytic cost model, which ranks
# strategies but (measured 2026-11-30) put a 2-rank Inception-v3 --small iteration at 40 ms
# against 262 ms measured: it has no per-task host cost of this runtime and assumes FLOP
# rates small CPU kernels do not reach.
ANALYTIC_NOTE = ("note: these times come from the analytic cost model (no --profile): they "
                 "rank strategies, but are not measured iteration times. For times to "
                 "compare with measured ones, measure the task costs on the device first: "
                 "python -m strategy.costs profile APP (docs/costs.md), then --profile FILE.")


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
