"""Compile every numba loop of the planner and the simulator once, into numba's on-disk cache
(next to each module, in its __pycache__), so that the first `make demo`, search or test run
does not pay for it: `make venv` runs `python -m strategy.precompile` after installing.

Without it nothing breaks: each loop compiles on its first use in a process and is cached
then (taskrt/validkernels.py, the largest, takes ~20-30 s on this 2-core machine; every
later process loads all of them in well under a second). Prints each group and its seconds.
"""
from __future__ import annotations

import sys
import time


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
    print(f"Done in {time.perf_counter() - total:.1f} s.", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
