"""Old vs new code of a few methods, timed in ONE process on the same search proposals.

    PYTHONPATH=$PWD python tools/ab_methods.py OLD_ROOT MODULE NAMES [APP GPUS N]
    e.g. tools/ab_methods.py /work/old-x taskrt.coherence \\
             RegionPlanner._copy_in,RegionPlanner._copy inception 16 200

Separate runs of old and new code taking turns (docs/design.md "Simulator speed") differ by
~3-5% run to run on a shared machine, more than most single changes gain. Here the methods
NAMES (Class.method, comma separated) of MODULE are taken from OLD_ROOT's copy of the module
(compiled in the new module's namespace: they may use only names it still has), and three
SimulationSessions make bench.sim_speed's seeded random changes (APP at GPUS, N changes):
one untimed with the new code first, which pays what a change pays only the first time in a
process (launch templates, imports: ~3% of the total, ~10% of the slowest changes, at
Inception@16), then the old and the new code, in alternating order, each timed in process
CPU with the methods swapped in for it. Every change's results must be equal (makespan, node
count, every node's start and end): it stops at the first that differs. `AA` as a sixth
argument runs the new code in both places, showing the method's own spread (two such runs at
Inception@16, 200 changes, load ~4: 1.0070 and 0.9985; separate runs: +-3-5%).
"""
from __future__ import annotations

import ast
import gc
import importlib
import os
import random
import sys
import textwrap
import time
import warnings


def old_methods(old_root: str, module, names: list[str]) -> dict:
    """{(class name, method name): function} compiled from OLD_ROOT's file of `module`."""
    path = os.path.join(old_root, *module.__name__.split(".")) + ".py"
    if not os.path.isfile(path):
        raise SystemExit(f"ab_methods: no {path}: OLD_ROOT holds no copy of {module.__name__}")
    text = open(path).read()
    lines = text.splitlines()
    out = {}
    for node in ast.parse(text).body:
        if not isinstance(node, ast.ClassDef):
            continue
        for f in node.body:
            if isinstance(f, ast.FunctionDef) and f"{node.name}.{f.name}" in names:
                first = min([f.lineno] + [d.lineno for d in f.decorator_list])
                code = textwrap.dedent("\n".join(lines[first - 1:f.end_lineno]))
                ns: dict = {}
                exec(compile("from __future__ import annotations\n" + "\n" * (first - 2)
                             + code, path, "exec"), module.__dict__, ns)
                out[node.name, f.name] = ns[f.name]
    missing = set(names) - {f"{c}.{m}" for c, m in out}
    if missing:
        raise SystemExit(f"ab_methods: {sorted(missing)} not found in {path}")
    return out


USAGE = "usage: tools/ab_methods.py OLD_ROOT MODULE Class.method[,...] [APP GPUS N [AA]]"


def main(argv: list[str]) -> None:
    if len(argv) not in (3, 6, 7):
        raise SystemExit(f"ab_methods: {len(argv)} arguments given\n{USAGE}")
    old_root, modname, names = argv[0], argv[1], argv[2].split(",")
    if not os.path.isdir(old_root):
        raise SystemExit(f"ab_methods: OLD_ROOT {old_root!r} is not a directory (a worktree "
                         f"of the old code, e.g. git worktree add --detach /tmp/old COMMIT)")
    try:
        app, gpus, n = (argv[3], int(argv[4]), int(argv[5])) if len(argv) > 5 else \
            ("inception", 16, 200)
    except ValueError:
        raise SystemExit(f"ab_methods: GPUS and N must be integers, got {argv[4:6]}\n{USAGE}")
    if gpus < 1 or n < 1:
        raise SystemExit(f"ab_methods: GPUS and N must be at least 1, got {gpus}, {n}")
    if len(argv) == 7 and argv[6] != "AA":
        raise SystemExit(f"ab_methods: the seventh argument can only be AA, got {argv[6]!r}")
    same = len(argv) > 6 and argv[6] == "AA"
    import numpy as np
    from bench.sim_speed import random_config
    from strategy.costs import CostModel
    from strategy.costs.app_profile import load_app
    from strategy.delta import SimulationSession
    from strategy.machine_model import machine_model
    warnings.simplefilter("ignore")
    module = importlib.import_module(modname)
    old = old_methods(old_root, module, names)
    new = {k: getattr(module, k[0]).__dict__[k[1]] for k in old}
    code = {"old": new if same else old, "new": new}

    def use(table):
        for (c, m), fn in table.items():
            setattr(getattr(module, c), m, fn)

    net = load_app(app, [], devices=gpus)
    mm = machine_model(f"p100:{max(1, gpus // 4)}")
    rng = random.Random(0)
    model = net.model
    props = [(op, random_config(op, gpus, rng))
             for op in (rng.choice(model.ops) for _ in range(n))]
    costs = CostModel()
    sessions = {v: SimulationSession(model, mm, costs, None, net.optimizer)
                for v in ("warm", "old", "new")}
    times: dict[str, list[float]] = {"old": [], "new": []}
    gc.disable()
    clock = time.process_time
    for k, (op, cfg) in enumerate(props):
        use(new)
        sessions["warm"].change(op.name, cfg)
        for v in (("old", "new") if k % 2 == 0 else ("new", "old")):
            use(code[v])
            t0 = clock()
            sessions[v].change(op.name, cfg)
            times[v].append(clock() - t0)
        a, b = sessions["old"].result, sessions["new"].result
        if a.makespan != b.makespan or len(a.start) != len(b.start) or \
                not np.array_equal(a.start, b.start) or not np.array_equal(a.end, b.end):
            raise SystemExit(f"ab_methods: change {k} ({op.name} {cfg}) differs: "
                             f"makespan {a.makespan} old, {b.makespan} new")
    use(new)
    for v in ("old", "new"):
        xs = sorted(times[v])
        print(f"{v}: total {sum(xs):.3f} s, mean {1e3 * sum(xs) / n:.2f} ms, median "
              f"{1e3 * xs[n // 2]:.2f}, p90 {1e3 * xs[int(n * .9)]:.1f}, slowest 10% "
              f"{sum(xs[int(n * .9):]):.3f} s")
    ratios = sorted(b / a for a, b in zip(times["old"], times["new"]) if a > 0)
    print(f"new / old: total {sum(times['new']) / sum(times['old']):.4f}, median per change "
          f"{ratios[len(ratios) // 2]:.4f} ({n} changes, results equal)")


if __name__ == "__main__":
    main(sys.argv[1:])
