"""Where the simulator (strategy/simulator.py) and the search (strategy/search.py) plug into
the command line: --machine, --simulate and --search.

--machine names a machine model (a preset, NAME:NODES, a machine file, or `local`,
calibrated now); it is for --simulate and --search only: a real run trains on the devices
the job runs on (startup.py refuses --machine there). --simulate predicts one iteration on
that model without training (apps/simulate.py). --search SECONDS finds a strategy with the
MCMC search (strategy/search.py) and then trains with it, or predicts it with --simulate.
"""
from __future__ import annotations

import sys
import warnings

from .app import App
from .errors import UsageError
from .judge import calibration_of, check_layout, unjudged_note


def machine_model(spec: str):
    """The machine model named by --machine: a preset, NAME:NODES, a file or 'local'."""
    from strategy.machines import MachineModelError
    from strategy.machines import machine_model as named_model
    try:
        return named_model(spec)
    except MachineModelError as e:
        raise UsageError(f"--machine {spec}: {e}") from None


def search_strategy(app: App, config, mm, machine, net, strategy: dict, strategy_name: str,
                    rank: int = 0, mpi: bool = False, out=None) -> tuple:
    """--search SECONDS: the best strategy the MCMC search (strategy/search.py) finds for
    the machine model `mm` (--simulate's), else for --machine's model when given, else for
    this job's own devices, calibrated (`local`, every rank takes part). Each searching rank
    (--search-ranks, default all) runs its own chains with seed --seed + rank, starting from
    data parallelism, the app's expert strategy and the --strategy file if any; the best
    strategy found (ties to the lowest rank) is every rank's result, and rank 0 prints its
    report. Returns (configs, name, the winning SearchResult on rank 0, else None)."""
    from parallel_ops.recompute import set_recompute
    from strategy.files import from_dict
    from strategy.logical_devices import shared
    if mm is None:
        mm = shared(machine_model(config.machine or "local"), config.devices_per_rank)
        if mm.num_devices != len(machine):
            raise UsageError(f"--machine {config.machine}: its model has {mm.num_devices} "
                             f"devices and this job runs on {len(machine)}; search for a "
                             "machine like this one (leave out --machine), or add --simulate.")
    calibration = calibration_of(config)       # the whole calibrated model, if any
    if calibration is not None:
        check_layout(calibration, mm, config)
    comm = None
    if mpi:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    searchers = min(config.search_ranks or (comm.Get_size() if comm else 1),
                    comm.Get_size() if comm else 1)
    found, mine = None, ("idle", None)
    if rank < searchers:
        try:
            found = _search(app, config, mm, net, strategy, strategy_name,
                            out if rank == 0 else None, rank, searchers)
            mine = ("ok", found.predicted, found.proposals)
        except UsageError as e:           # every rank must hear of it, or they wait forever
            mine = ("error", str(e))
        except Exception as e:
            mine = ("error", f"the search failed: {type(e).__name__}: {e}")
    outcomes = [mine]
    if comm is not None:
        from taskrt.discovery import idle_barrier
        idle_barrier(comm)                    # ranks done early sleep while others search
        outcomes = comm.allgather(mine)
    for r, (status, value, *_) in enumerate(outcomes):
        if status == "error":
            raise UsageError(f"--search {config.search:g}: {value}"
                             + (f" (on rank {r})" if r else ""))
    ran = [(value, r) for r, (status, value, *_) in enumerate(outcomes) if status == "ok"]
    winner = min(ran)[1]          # the fastest predicted time, ties to the lowest rank
    payload = None
    if rank == winner:
        payload = (to_file_object(found, net), found.recompute, found.recompute_segments,
                   found.text(), found.explain(net.model).text(), found if comm else None)
    if comm is not None:
        payload = comm.bcast(payload, root=winner)
    value, plan, segments, text, explained, result = payload
    if rank == 0:
        if searchers > 1:
            per = [(r, o[1], o[2]) for r, o in enumerate(outcomes) if o[0] == "ok"]
            _say(out, f"searched on {searchers} ranks (seeds {config.seed}-"
                      f"{config.seed + searchers - 1}), {sum(p for _, _, p in per)} proposals "
                      "in all; best per rank: " + ", ".join(
                          f"{t * 1e3:.4g} ms (rank {r}, {p} proposals)" for r, t, p in per)
                      + f"; rank {winner}'s is the best:")
        _say(out, text)
        _say(out, explained)
        if not config.profile:
            _say(out, ANALYTIC_NOTE)
        if winner != 0:
            found = result
    if plan is not None:              # the recomputation searched with the strategy
        set_recompute(net.model, segments)
    configs, name = from_dict(value).configs, f"searched ({config.search:g} s)"
    if calibration is not None and plan is None:
        configs, name, found = _judged(app, config, calibration, mm, net, configs, name,
                                       {strategy_name: strategy} if strategy else {},
                                       found, rank, comm, out)
    elif rank == 0 and unjudged_note(config):
        _say(out, unjudged_note(config))
    return configs, name, found if rank == 0 else None


def _judged(app, config, calibration, mm, net, configs, name, starts, found, rank, comm,
            out) -> tuple:
    """The search's result judged by the calibration (apps/judge.py): rank 0 predicts the
    candidates and says which it keeps; every rank returns (configs, name, found) of it,
    found's predicted times the calibration's."""
    import dataclasses
    from strategy.heldout import kept, margin
    from .judge import DATA_PARALLEL, SEARCHED, candidates, judge, verdict_text
    from .startup import optimizer
    named = candidates(app, net, mm, configs, starts)
    times = None
    error, what = margin(calibration[0])     # held out of its fit, else on its own runs
    if rank == 0:
        times = judge(calibration, mm, net, named, optimizer(config))
        _say(out, verdict_text(times, config.machine, (error, what)))
    if comm is not None:
        from taskrt.discovery import idle_barrier
        idle_barrier(comm)
        times = comm.bcast(times, root=0)
    best = kept(times, error, DATA_PARALLEL)
    if found is not None:             # its times the calibration's (--check-prediction)
        by_name = {n: t for t, n in times}
        by_name.setdefault(DATA_PARALLEL, by_name[SEARCHED])   # the same configs
        baselines = {key: by_name[n] for key, n in (("data_parallel", DATA_PARALLEL),
                                                    ("expert", "expert")) if n in by_name}
        found = dataclasses.replace(found, configs=named[best], predicted=by_name[best],
                                    baselines=dict(found.baselines, **baselines))
    if best == SEARCHED:
        return configs, name, found
    why = ("judged faster than the search's result" if best == times[0][1] else
           "the search's result not faster by more than the calibration's error")
    return named[best], f"{best} ({why})", found


def _say(out, text: str) -> None:
    if out is not None:
        print(text, file=out, flush=True)


def to_file_object(found, net) -> dict:
    """The strategy file's object of a search's best strategy (what rank 0 broadcasts)."""
    from strategy.files import to_dict
    return to_dict(found.configs, net.model)


def _search(app: App, config, mm, net, strategy: dict, strategy_name: str, out,
            rank: int = 0, ranks: int = 1):
    """One searching rank's part of --search (seed --seed + rank, its share of
    --search-proposals): run it, print its progress to `out`, return the SearchResult."""
    from strategy.costs import CostWarning
    from strategy.experts import expert_for
    from strategy.search import search

    from .simulate import cost_model
    from .startup import optimizer
    expert = expert_for(app, net.model, mm)
    opt, costs = optimizer(config), cost_model(config, net)
    proposals = config.search_proposals
    if proposals is not None:
        proposals = proposals // ranks + (rank < proposals % ranks)

    def progress(p):
        if not config.quiet:
            _say(out, f"  search {p['elapsed']:6.1f} s  {p['proposals']:6d} proposals "
                      f"({p['rate']:.1f}/s{' on rank 0' if ranks > 1 else ''})  from "
                      f"{p['candidate']:<13} current {p['current'] * 1e3:.4g} ms  best "
                      f"{p['best'] * 1e3:.4g} ms")
    _say(out, f"searching a strategy for {config.search:g} s on {mm}"
              + (f" on {ranks} ranks" if ranks > 1 else "") + " ...")
    with warnings.catch_warnings():      # the report says where the costs come from
        warnings.simplefilter("ignore", CostWarning)
        kw = dict(budget_s=config.search,
                  proposals=max(1, proposals) if proposals is not None else None,
                  seed=config.seed + rank, expert=expert, optimizer=opt,
                  progress=progress, progress_every=2.0,
                  starts={strategy_name: strategy} if strategy else None)
        if app.search is not None:          # the app's own (the GPT's: strategy/tied.py)
            return app.search(config, net, mm, costs, **kw)
        return search(net.model, mm, costs, **kw,
                      recompute=app.recompute_plans(net.model) if app.recompute_plans
                      else None)


# Without --profile, predicted times come from the analytic cost model, which ranks
# strategies but (measured 2026-11-30) put a 2-rank Inception-v3 --small iteration at 40 ms
# against 262 ms measured: it has no per-task host cost of this runtime and assumes FLOP
# rates small CPU kernels do not reach.
ANALYTIC_NOTE = ("note: these times come from the analytic cost model (no --profile): they "
                 "rank strategies, but are not measured iteration times. For times to "
                 "compare with measured ones, measure the task costs on the device first: "
                 "python -m strategy.costs profile APP (docs/costs.md), then --profile FILE.")


def simulate_run(app: App, setup, out=None):
    """The predicted iteration of --simulate on the setup's machine model: prints its report
    on rank 0, writes --trace, and returns the Prediction."""
    from .simulate import predict, write_prediction_trace
    from .startup import optimizer
    config = setup.config
    p = predict(app, setup, optimizer(config), out)
    if setup.rank == 0:
        if out is not None:
            print(p.text(), file=out, flush=True)
        if config.trace:
            where = keep_output(config.trace,
                                lambda path: write_prediction_trace(path, p, config.argv),
                                "simulated timeline", warn=out is not None)
            if out is not None:
                print(f"simulated timeline written to {where}", file=out, flush=True)
    return p


def keep_output(path: str, write, what: str, warn: bool = True) -> str:
    """Write an output at the end of the work (write(path)); when that fails, keep it where
    parallel_ops.outputs.write_keeping can and warn (on stderr) where it went. Returns the
    path written."""
    from parallel_ops.outputs import write_keeping
    try:
        where, note = write_keeping(path, write)
    except OSError as e:
        raise UsageError(f"{what}: {e}") from None
    if note is not None and warn:
        print(f"warning: {what}: {note}", file=sys.stderr, flush=True)
    return where
