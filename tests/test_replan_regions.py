"""tools/replan_regions.py sees every region a search re-plans (also through replanning.py's
import of replan_region) and each path's count; every region planned whole was refused a
slab plan once, under a reason, and counts under it. Run in a fresh interpreter: it replaces functions in loaded
modules."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_replan_regions_counts_every_re_planned_region():
    got = subprocess.run([sys.executable, "tools/replan_regions.py", "alexnet", "4", "40"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert got.returncode == 0, got.stderr[-2000:]
    out = json.loads(got.stdout)
    assert out["replace_calls"] > 0 and out["regions"] > out["replace_calls"]
    paths = out["by_path"]
    assert sum(p["regions"] for p in paths.values()) == out["regions"]
    assert paths["memo"]["regions"] > 0
    assert sum(out["slab_refusals"].values()) == paths["whole"]["regions"]
    by_reason = out["refused_then_planned_whole"]
    assert sum(r["regions"] for r in by_reason.values()) == paths["whole"]["regions"]
    assert abs(sum(r["cpu_s"] for r in by_reason.values()) - paths["whole"]["cpu_s"]) < 0.05
    assert out["missed"]["regions"] == out["regions"] - paths["memo"]["regions"]
    per_replace = sum(k["regions"] for k in out["per_replace"].values())
    assert abs(per_replace * out["replace_calls"] - out["regions"]) < 0.01 * out["regions"] + 1
