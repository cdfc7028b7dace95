"""What `--simulate` spends besides simulating: an app script imports torch and the project
with the cyclic collector paused (apps/scriptgc.py: no full collection during those
imports) and exits with every object frozen (no collection walks them at shutdown), and
loading the compiled list scheduler and memory sweep does not import
scipy.linalg (taskrt/numbastart.py: numba's BLAS probe), while scipy.linalg still imports
afterwards and the compiled loops give what their Python versions give. Run in a fresh
interpreter: the test process has long imported all of it."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import gc, runpy, sys
full = []
gc.callbacks.append(lambda phase, info: full.append(1)
                    if phase == "stop" and info["generation"] == 2 else None)
import apps.transformer
print("FULL COLLECTIONS IN IMPORTS", len(full))
sys.argv = ["apps/transformer.py", "--simulate", "--machine", "dgx-h100:2", "--layers", "2",
            "--width", "64", "--heads", "4", "--seq-len", "32", "--vocab", "100",
            "--batch-size", "16"]
try:
    runpy.run_path("apps/transformer.py", run_name="__main__")
except SystemExit as e:
    assert not e.code, e.code
print("FROZEN AT EXIT", gc.get_freeze_count() > 10000)
gc.unfreeze()
import strategy.memsweep
strategy.memsweep._kernels()
print("LINALG", "scipy.linalg" in sys.modules)
import scipy.linalg
print("LINALG AFTER", scipy.linalg.__name__)
"""


def test_simulate_skips_collections_and_blas_probe():
    got = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert got.returncode == 0, got.stderr[-2000:]
    lines = got.stdout.splitlines()
    assert "iteration time" in got.stdout, got.stdout[-2000:]
    assert "FULL COLLECTIONS IN IMPORTS 0" in lines, lines
    assert "FROZEN AT EXIT True" in lines, lines
    assert "LINALG False" in lines, lines[-3:]
    assert "LINALG AFTER scipy.linalg" in lines, lines[-3:]


APP_SCRIPTS = sorted(p for p in (ROOT / "apps").glob("*.py")
                     if "__main__" in p.read_text() and "main(APP)" in p.read_text())


def test_every_app_script_pauses_its_imports_and_exits_frozen():
    """The paper's apps and the Transformer/GPT all start and end the same way."""
    import ast
    assert len(APP_SCRIPTS) >= 8, APP_SCRIPTS
    for path in APP_SCRIPTS:
        tree = ast.parse(path.read_text())
        paused = [n for n in tree.body if isinstance(n, ast.With)
                  and ast.unparse(n.items[0].context_expr) == "imports_paused()"]
        assert paused, f"{path.name}: imports not inside `with imports_paused():`"
        outside = [ast.unparse(n) for n in tree.body
                   if isinstance(n, (ast.Import, ast.ImportFrom))
                   and not ast.unparse(n).startswith(("from __future__", "from apps.scriptgc"))]
        assert not outside, f"{path.name}: imports outside the paused block: {outside}"
        main_block = [n for n in tree.body if isinstance(n, ast.If)
                      and "__main__" in ast.unparse(n.test)]
        assert main_block and "exit_frozen(main(APP))" in ast.unparse(main_block[0]), \
            f"{path.name}: its __main__ block does not end with exit_frozen(main(APP))"
