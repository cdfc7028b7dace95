"""--check-prediction N: after --search, train the searched strategy and data parallelism N
iterations each (after one warm-up) on this job's devices and print, for both, the
iteration time the search predicted and the one measured (the period of the N iterations,
as a run's: apps/report.py Result.period_s), so a user sees whether the prediction held
before trusting it (docs/simulator.md). Every rank takes part."""
from __future__ import annotations


def measured_iteration(net, machine, configs, optimizer, seed: int, iterations: int,
                       mpi: bool) -> float:
    """Seconds per iteration of `iterations` training steps (after one warm-up) under
    configs: their period, from a mark before the first to one after the last (under MPI
    each after a barrier of every rank, so that it holds every rank's iterations whole),
    over their number. The feeds are made before the first mark: the simulator predicts
    the steps."""
    trainer = net.model.compile(machine, configs, optimizer,
                                executor="mpi" if mpi else "local")
    feeds = [net.synthetic(seed, it) for it in range(1 + iterations)]
    from .training import timed_mark
    trainer.step(feeds[0])
    t = timed_mark(trainer, mpi, "the barrier before the checked iterations")
    for f in feeds[1:]:
        trainer.step(f)
    end = timed_mark(trainer, mpi, "the barrier after the checked iterations")
    return (end - t) / iterations


def check_prediction(setup, optimizer, say) -> list[tuple[str, float | None, float]]:
    """[(strategy, predicted s or None off rank 0, measured s)] for the searched strategy
    and data parallelism, said with `say` (which prints on rank 0 only)."""
    from strategy import standard
    a, net, machine, found = setup.config, setup.network, setup.machine, setup.search
    dp = standard.data_parallel(net.model, list(range(len(machine))))
    cases = (("searched", setup.strategy, found.predicted if found else None),
             ("data parallel", dp, found.baselines.get("data_parallel") if found else None))
    rows = []
    for name, configs, predicted in cases:
        m = measured_iteration(net, machine, configs, optimizer(a), a.seed,
                               a.check_prediction, setup.mpi)
        rows.append((name, predicted, m))
    say(f"prediction check ({a.check_prediction} iterations each, their period):")
    for name, p, m in rows:
        if p is not None:
            say(f"  {name:<14} predicted {1e3 * p:9.2f} ms  measured {1e3 * m:9.2f} ms  "
                f"({100 * (p - m) / m:+.1f}%)")
    if all(p is not None for _, p, _ in rows):
        (_, ps, ms), (_, pd, md) = rows
        held = (ps <= pd) == (ms <= md)
        say(f"  predicted {'faster' if ps <= pd else 'slower'} than data parallel: "
            f"{'held' if held else 'did NOT hold'} when run "
            f"({md / ms:.2f}x measured, {pd / ps:.2f}x predicted)")
    return rows
