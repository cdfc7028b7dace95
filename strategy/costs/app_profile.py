"""Profiling an app for every config a search may propose: `profile_app`.

A search on N devices proposes, per operator, degrees per dim. Costs depend only on an
operator's own config (its part shapes), so one graph can cover many operators at once:
for each dim position k and degree d in 1..N, one strategy gives every operator degree d on
its k-th dim (where the extent allows; degree 1 elsewhere). Those graphs, plus data
parallelism and the app's mixed strategy, are lowered (parallel_ops) and planned (taskrt);
their distinct cost keys are profiled once each. So every single-dim split of every operator
at degrees 1..N is measured; configs splitting several dims at once fall back to the
analytic model unless the mixed strategy happens to use them.

Workloads (an app's name, or a Python file defining APP) are found through
strategy/workload.py; this package never imports the apps.
"""
from __future__ import annotations

import os
import time

from parallel_ops import ConfigError, ParallelConfig
from parallel_ops.lowering import lower
from taskrt import Machine, plan

from ..workload import BuiltWorkload, load_workload
from .profile import Profile
from .profiler import distinct_nodes, profile_nodes


def load_app(app_name: str, argv=(), devices: int = 1) -> BuiltWorkload:
    """The model (and optimizer, batch, ...) of workload `app_name` built with its flags
    `argv` for a global batch of `devices` times its per-device batch. Raises
    WorkloadError for an unknown workload or flags it refuses.

        built = load_app("alexnet", ["--small"], devices=4); built.model, built.optimizer
    """
    return load_workload(app_name).build_from_flags(list(argv), devices)


def search_strategies(model, devices: int) -> list[dict]:
    """Strategies that together give every operator every single-dim split of degree
    1..devices (see the module doc)."""
    ndims = max((len(op.dims) for op in model.ops), default=0)
    out = []
    for k in range(ndims):
        for d in range(1, devices + 1):
            s = {}
            for op in model.ops:
                if k < len(op.dims) and d <= op.dims[k].extent:
                    s[op.name] = ParallelConfig(((op.dims[k].name, d),), tuple(range(d)))
                else:
                    s[op.name] = ParallelConfig((), (0,))
            out.append(s)
    return out


def app_graphs(app_name: str, argv=("--small",), devices: int = 2):
    """(graphs, built workload) covering the configs a search on `devices` devices may
    propose."""
    built = load_app(app_name, argv, devices)
    model, opt = built.model, built.optimizer
    machine = Machine.local(devices)
    strategies = [None]                       # data parallel
    if built.mixed_strategy is not None:
        strategies.append(built.mixed_strategy(model, devices))
    strategies += search_strategies(model, devices)
    graphs = []
    for s in strategies:
        try:
            lowered = lower(model, s, machine, opt)
        except ConfigError:                   # a mixed strategy not made for this count
            continue
        graphs.append(plan(lowered.launches, machine, initial=lowered.initial))
    return graphs, built


def profile_app(app_name: str, argv=("--small",), devices: int = 2, device: str = "cpu",
                repeats: int = 5, warmup: int = 2, output=None, progress=None) -> Profile:
    """Profile app `app_name` (built with its flags `argv`) for searches on up to `devices`
    devices, on the local torch `device`. With `output`, keys already measured there for
    this device kind are skipped and the result is merged into the file.

        prof = profile_app("alexnet", ["--small"], devices=4, output="alexnet.profile")
    """
    t0 = time.perf_counter()
    graphs, built = app_graphs(app_name, argv, devices)
    t_build = time.perf_counter() - t0
    nodes = distinct_nodes(graphs)
    old = Profile.load(output) if output is not None and os.path.exists(output) else None
    prof = profile_nodes(nodes, device, repeats, warmup, built.int_ranges, skip=old,
                         progress=progress)
    run = prof.meta["runs"][0]
    run.update(app=app_name, argv=list(argv), devices=devices, graphs=len(graphs),
               keys=len(nodes), measured=len(prof.times), build_s=round(t_build, 3),
               seconds=round(time.perf_counter() - t0, 3))
    if output is not None:
        prof.save(output, merge=True)
    return prof
