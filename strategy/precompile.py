"""Compile every numba loop of the planner and the simulator once, into numba's on-disk cache
(next to each module, in its __pycache__), so that the first `make demo`, search or test run
does not pay for it: `make venv` runs `python -m strategy.precompile` after installing.

Without it nothing breaks: each loop compiles on its first use in a process and is cached
then (taskrt/validkernels.py, the largest, takes ~20-30 s on this 2-core machine; every
later process loads all of them in well under a second). Prints each group and its seconds.

It also writes the project's own bytecode (compileall of its packages, ~1 s). Python does
that itself on first import, except where PYTHONDONTWRITEBYTECODE is set (as on this
project's machines): there every process compiled the project's modules it imports from
source, each time (a `--simulate`, each MPI rank, each test's subprocess). A source edited
later is recompiled by Python as usual (its .pyc no longer matches).
"""
from __future__ import annotations

import compileall
import sys
import time
from pathlib import Path

# The project's packages whose bytecode main() writes (tests: pytest rewrites its own).
PACKAGES = ("apps", "bench", "parallel_ops", "strategy", "taskrt", "tools")


def _loops():
    """(name, function that compiles or loads it) for each cached group of loops."""
    from taskrt import validkernels
    from . import listsched, memsweep, timearrays
    return [("taskrt/validkernels.py (a region's reads, compiled)", validkernels.kernels),
            ("strategy/listsched.py (the list scheduler)",
             lambda: (listsched._kernel(False), listsched._kernel(True))),
            ("strategy/memsweep.py (the memory peak)", memsweep._kernels),
            ("strategy/timearrays.py (joined timing arrays)", timearrays._join_kernel)]


def main() -> int:
    print("Compiling the planner's and simulator's loops with numba (once; cached on disk) ...",
          flush=True)
    total = time.perf_counter()
    for name, make in _loops():
        t = time.perf_counter()
        make()
        print(f"  {name}: {time.perf_counter() - t:.1f} s", flush=True)
    t = time.perf_counter()
    root = Path(__file__).resolve().parents[1]
    if not all([compileall.compile_dir(root / pkg, quiet=1) for pkg in PACKAGES]):
        print("  (some modules did not compile to bytecode: Python compiles them at import)")
    print(f"  the project's bytecode ({', '.join(PACKAGES)}): "
          f"{time.perf_counter() - t:.1f} s", flush=True)
    print(f"Done in {time.perf_counter() - total:.1f} s.", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
