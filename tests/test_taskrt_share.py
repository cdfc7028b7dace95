"""tools/taskrt_share.py times the planner's entry points a search calls and classes every copy
a read makes: the classes' copies add up to the copies the planned reads returned, and the
reads' phases fit in plan_reads' time. Run in a fresh interpreter: it replaces methods of
loaded classes."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_taskrt_share_classes_every_copy():
    got = subprocess.run([sys.executable, "tools/taskrt_share.py", "alexnet", "4", "40"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert got.returncode == 0, got.stderr[-2000:]
    out = json.loads(got.stdout)
    calls, cpu = out["calls"], out["cpu_s"]
    assert calls["Planner.replace"] > 0 and calls["Planner.add_launches"] > 0
    assert calls["plan_reads"] > 0 and calls["copies in"] >= calls["plan_reads"]
    assert out["copies_made"] > 0
    classes = out["copies_by_class"]
    assert sum(c["copies"] for c in classes.values()) == out["copies_made"]
    assert sum(c["reads"] for c in classes.values()) <= calls["copies in"]
    assert sum(c["cpu_s"] for c in classes.values()) <= cpu["copies in"] + 0.01
    assert cpu["copies in"] + cpu["reductions"] <= cpu["plan_reads"] + 0.01
