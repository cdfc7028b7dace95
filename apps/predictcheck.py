"""--check-prediction N: after --search, train the searched strategy and data parallelism N
iterations each (after one warm-up) on this job's devices and print, for both, the
iteration time the search predicted and the one measured (median), so a user sees whether
the prediction held before trusting it (docs/simulator.md). Every rank takes part."""
from __future__ import annotations

import statistics
import time


def measured_iteration(net, machine, configs, optimizer, seed: int, iterations: int,
                       mpi: bool) -> float:
    """Median seconds of `iterations` training steps (after one warm-up) under configs."""
    trainer = net.model.compile(machine, configs, optimizer,
                                executor="mpi" if mpi else "local")
    times = []
    for it in range(1 + iterations):
        feeds = net.synthetic(seed, it)
        if mpi:
            from taskrt.discovery import idle_barrier
            from mpi4py import MPI
            idle_barrier(MPI.COMM_WORLD)
        t = time.perf_counter()
        trainer.step(feeds)
        if it:
            times.append(time.perf_counter() - t)
    return statistics.median(times)


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
    say(f"prediction check ({a.check_prediction} iterations each, median):")
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
