"""`--simulate` of Inception-v3 (--small) and of a small GPT-style transformer needs no meta tensor: every task's work is declared
(Op.work) and every forward part's saved state too (Op.saved_state_bytes), so neither is
measured on meta tensors and torch._dynamo (which torch imports at the first meta
operation, ~2 s of CPU) is never imported. Run in a fresh interpreter: the test process
has long imported it."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
APP, ARGS = {app!r}, {args!r}
import runpy, sys
import parallel_ops.saved_state as saved_state
measured = []
real = saved_state._measure
def measure(*args):
    measured.append(args[0].type)
    return real(*args)
saved_state._measure = measure
sys.argv = [APP] + ARGS
try:
    runpy.run_path(APP, run_name="__main__")
finally:
    print("MEASURED", sorted(set(measured)))
    print("DYNAMO", "torch._dynamo" in sys.modules)
"""


@pytest.mark.parametrize("app,args", [
    ("apps/inception.py", ["--simulate", "--small", "--machine", "dgx-h100:2"]),
    ("apps/transformer.py", ["--simulate", "--machine", "dgx-h100:2", "--layers", "2",
                             "--width", "256", "--heads", "4", "--seq-len", "128",
                             "--vocab", "1000", "--batch-size", "16"])])
def test_simulate_makes_no_meta_tensor(app, args):
    script = SCRIPT.replace("{app!r}", repr(app)).replace("{args!r}", repr(args))
    got = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert got.returncode == 0, got.stderr[-2000:]
    lines = got.stdout.splitlines()
    assert "iteration time" in got.stdout, got.stdout[-2000:]
    assert "MEASURED []" in lines, lines[-2:]
    assert "DYNAMO False" in lines, lines[-2:]
