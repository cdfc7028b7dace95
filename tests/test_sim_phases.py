"""tools/sim_phases.py times every phase of a `--simulate` run, also the functions another
module imported by name (apps/simulate.py's lower, plan and simulate), and counts the
graph's nodes. A phase counts as seen by its calls, not its CPU: the report takes under the
millisecond the output rounds to on a fast machine. Run in a fresh interpreter: it replaces functions in loaded modules."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from sim_phases import PHASES  # noqa: E402


def test_sim_phases_sees_every_phase():
    got = subprocess.run([sys.executable, "tools/sim_phases.py", "16", "2"], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert got.returncode == 0, got.stderr[-2000:]
    out = json.loads(got.stdout)
    assert out["nodes"] == 1343                         # GPT-3 2.7B widths, 2 blocks, 16 GPUs
    for label, _, _ in PHASES:                          # each phase ran and was timed
        assert out["calls"].get(label, 0) > 0, label
        assert label in out["cpu_s"], label
