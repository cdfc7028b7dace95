"""Loading the compiled loops (taskrt/validkernels.py; strategy/listsched.py, memsweep.py,
timearrays.py) without numba's BLAS probe and, for cache hits, without numba's registry refresh
(`loading_kernels`; here in taskrt, the lowest layer that compiles any).

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

Second (`cache_hits_light`): numba loads a cached function only after refreshing its typing
and target contexts (Cache.load_overload -> BaseContext.refresh), which imports and installs
every implementation registry numba has (numba.np.*, numba.typed, numba.experimental,
cffi, ...: ~0.15-0.2 s of CPU here, a third of loading all our loops). Machine code from the
cache needs none of them: only the runtime (NRT) the loops allocate with. So while our loops
are made, a cache hit initialises the runtime and loads; a miss compiles as before (numba's
compiler refreshes both contexts itself), and any later compilation in the process does too
(then with scipy.linalg importable: on cache hits the BLAS probe above is not reached at all).
"""
from __future__ import annotations

import sys
from contextlib import contextmanager

LINALG = "scipy.linalg"


@contextmanager
def loading_kernels():
    """Make or load our numba functions (cache=True) in this block: numba's BLAS probe
    skipped and cache hits loaded without the registry refresh (above)."""
    with blas_probe_skipped(), cache_hits_light():
        yield


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


def _load_light(cache, sig, target_context):
    """numba's Cache.load_overload without target_context.refresh(): the runtime initialised
    (idempotent), then the cached CompileResult (None on a miss: the caller compiles)."""
    from numba.core.runtime.nrt import rtsys
    rtsys.initialize(target_context)
    with cache._guard_against_spurious_io_errors():
        return cache._load_overload(sig, target_context)


def light_loads_supported() -> bool:
    """Whether this numba has the internals _load_light uses (else loads stay numba's own)."""
    from numba.core.caching import Cache
    from numba.core.runtime import nrt
    return (hasattr(Cache, "_load_overload") and hasattr(Cache, "load_overload")
            and hasattr(Cache, "_guard_against_spurious_io_errors")
            and hasattr(getattr(nrt, "rtsys", None), "initialize"))


@contextmanager
def cache_hits_light():
    """Run a block with numba's cache loads as _load_light (restored after; nests)."""
    if not light_loads_supported():
        yield
        return
    from numba.core.caching import Cache
    before = Cache.load_overload
    Cache.load_overload = _load_light
    try:
        yield
    finally:
        Cache.load_overload = before
