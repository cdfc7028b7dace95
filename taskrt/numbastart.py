"""Loading the compiled loops (taskrt/validkernels.py; strategy/listsched.py, memsweep.py,
timearrays.py) without numba's BLAS probe (here in taskrt, the lowest layer that compiles any).

The first compilation or cache load of a numba function in a process loads numba's numpy
support, and numba.np.arraymath then probes for BLAS by importing scipy.linalg (where
scipy is installed; `import numba` itself imports only the top-level scipy package): about
0.15-0.2 s of CPU, a quarter of loading the list scheduler in a `--simulate` (0.63 -> 0.49 s
side by side, GPT-3 2.7B on 128 GPUs). Our loops call no BLAS (no np.dot, no linear
algebra), so while they are made, `scipy.linalg` is unimportable (None in sys.modules):
numba records that BLAS is missing and goes on.
Consequence: numba's arraymath records that BLAS is missing (`_HAVE_BLAS`, read once at its
import), so in such a process the inner products of np.cov / np.corrcoef in numba code use
numba's own loop instead of BLAS (equal up to rounding, slower for large inputs). np.dot and the
rest of numba's linear algebra check for scipy when they compile, and scipy.linalg imports
normally after the block (checked: a numba np.dot compiles and runs afterwards). A process
that has imported scipy.linalg already is unchanged.
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
