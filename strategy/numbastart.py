"""Loading the simulator's compiled loops (listsched.py, memsweep.py) without numba's BLAS
probe.

The first compilation or cache load of a numba function in a process loads numba's numpy
support, and numba.np.arraymath then probes for BLAS by importing scipy.linalg (where
scipy is installed; `import numba` itself imports only the top-level scipy package): about
0.15-0.2 s of CPU, a quarter of loading the list scheduler in a `--simulate` (0.63 -> 0.49 s
side by side, GPT-3 2.7B on 128 GPUs). Our loops call no BLAS (no np.dot, no linear
algebra), so while they are made, `scipy.linalg` is unimportable (None in sys.modules):
numba records that BLAS is missing and goes on.
Consequence: in such a process a numba function that calls np.dot fails to compile with
numba's "scipy 0.16+ is required for linear algebra". A process that has imported
scipy.linalg already is unchanged, and scipy.linalg imports normally afterwards.
"""
from __future__ import annotations

import sys
from contextlib import contextmanager

LINALG = "scipy.linalg"


@contextmanager
def blas_probe_skipped():
    """Run a block (one that makes numba functions) with scipy.linalg unimportable, unless
    it is imported already."""
    if LINALG in sys.modules:
        yield
        return
    sys.modules[LINALG] = None
    try:
        yield
    finally:
        if LINALG in sys.modules and sys.modules[LINALG] is None:
            del sys.modules[LINALG]
