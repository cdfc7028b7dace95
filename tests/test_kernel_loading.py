"""Loading the compiled loops from numba's cache without numba's registry refresh
(taskrt/numbastart.py, cache_hits_light): in a fresh interpreter every loop of
strategy/precompile.py is a cache hit, numba's implementation registries stay unimported,
a `--simulate` prints what it prints with numba's own loads, and numba still compiles new
functions afterwards (its compiler refreshes the contexts itself)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import runpy, sys
light = sys.argv[1] == "light"
import taskrt.numbastart as numbastart
if not light:
    numbastart.light_loads_supported = lambda: False
from strategy import precompile
for name, make in precompile._loops():
    made = make()
    for dispatcher in (made if isinstance(made, tuple) else (made,)):
        stats = dispatcher.stats
        print("LOADED", dispatcher.__name__, sum(stats.cache_hits.values()),
              sum(stats.cache_misses.values()))
print("REGISTRIES", sorted(m for m in ("numba.typed.typeddict", "numba.np.linalg",
                                       "numba.np.npyimpl") if m in sys.modules))
sys.argv = sys.argv[2:]                 # the app's command line (SIMULATE)
code = None
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as stop:
    code = stop.code
print("EXIT", code)
import numpy as np
from numba import njit, typed, types
@njit
def later(a):
    d = typed.Dict.empty(types.int64, types.float64)
    d[1] = np.dot(a, a)
    return d[1]
print("LATER", later(np.arange(3.0)))
"""


# a small Transformer on 32 simulated GPUs, planned and simulated with the loops loaded above
SIMULATE = ["apps/transformer.py", "--simulate", "--machine", "dgx-h100:4", "--layers", "3",
            "--width", "96", "--heads", "4", "--seq-len", "64", "--vocab", "128",
            "--batch-size", "32"]


def _run(mode: str) -> list[str]:
    got = subprocess.run([sys.executable, "-c", SCRIPT, mode] + SIMULATE, cwd=ROOT,
                         capture_output=True, text=True, timeout=900)
    assert got.returncode == 0, got.stderr[-3000:]
    return got.stdout.splitlines()


def _prediction(lines: list[str]) -> list[str]:
    """The --simulate output without its timings ("built in", "simulated in")."""
    start = next(i for i, line in enumerate(lines) if line.startswith("graph of "))
    return [line for line in lines[start:]
            if not line.startswith(("graph of ", "simulated in", "LATER"))]


def test_cached_loops_load_light_and_predict_alike():
    _run("light")                       # compiles (a miss) where the cache is stale
    light = _run("light")
    loaded = [line.split() for line in light if line.startswith("LOADED ")]
    assert len(loaded) >= 12, loaded
    assert all(hits != "0" and misses == "0" for _, _, hits, misses in loaded), loaded
    assert "REGISTRIES []" in light, light
    full = _run("full")
    assert "REGISTRIES []" not in full, full
    assert "iteration time" in "\n".join(light) and "EXIT 0" in light, light
    assert _prediction(light) == _prediction(full)
    assert "LATER 5.0" in light and "LATER 5.0" in full


LAZY = r"""
import runpy, sys
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit:
    pass
from taskrt import validkernels
from strategy import listsched
print("ENTRIES", sorted(validkernels._compiled), listsched._compiled_ready is None)
"""


def test_only_the_loops_a_prediction_calls_are_loaded():
    """validkernels' entry points and listsched's orders load when first called: the small
    Transformer's build never asks overlapping or build (a grid), nor the ready order."""
    got = subprocess.run([sys.executable, "-c", LAZY] + SIMULATE, cwd=ROOT,
                         capture_output=True, text=True, timeout=900)
    assert got.returncode == 0, got.stderr[-3000:]
    assert "ENTRIES ['apply', 'compact', 'copy_reads'] True" in got.stdout.splitlines(), \
        got.stdout[-2000:]
