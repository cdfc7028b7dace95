"""`python -m strategy.precompile` (run by `make venv`) compiles every module's numba loops, so
that no first search, demo or test pays for a compile: a module that compiles loops with njit
and is missing from its list fails here."""
from __future__ import annotations

from pathlib import Path

from strategy import precompile

ROOT = Path(__file__).resolve().parents[1]


def test_every_module_with_numba_loops_is_precompiled():
    compiling = sorted(str(p.relative_to(ROOT)) for pkg in ("taskrt", "strategy", "parallel_ops")
                       for p in (ROOT / pkg).rglob("*.py") if "njit(" in p.read_text())
    listed = [name.split()[0] for name, _ in precompile._loops()]
    assert compiling, "no module compiles numba loops: the scan is broken"
    missing = [m for m in compiling if m not in listed]
    assert not missing, f"strategy/precompile.py does not compile {missing}: add them"


def test_precompile_runs(capsys):
    assert precompile.main() == 0
    out = capsys.readouterr().out
    assert out.count(": ") >= len(precompile._loops()) and "Done in" in out
