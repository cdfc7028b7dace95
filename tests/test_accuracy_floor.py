"""tools/accuracy_floor.py: two collections' agreement, one speed level per layout and app
removed, cases whose strategy files differ left out, clear errors on bad folders."""
import importlib.util
import json
import os
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "accuracy_floor", Path(__file__).resolve().parents[1] / "tools" / "accuracy_floor.py")
accuracy_floor = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(accuracy_floor)

STRATEGIES = ("data", "attribute", "operation", "parameter", "searched")


def _collection(folder, times: dict, files: dict | None = None) -> str:
    """A collection of 1x2 cases {(app, strategy): (median, [periods])}."""
    os.makedirs(os.path.join(folder, "d2"), exist_ok=True)
    cases = []
    for (app, s), (median, periods) in times.items():
        cases.append({"app": app, "strategy": s, "measured_s": median, "periods_s": periods})
        with open(os.path.join(folder, "d2", f"{app}_{s}.json"), "w") as f:
            f.write((files or {}).get((app, s), f"{app} {s}"))
    with open(os.path.join(folder, "measured.json"), "w") as f:
        json.dump({"measured": {"1x2": {"cases": cases}}}, f)
    return str(folder)


def _times(scale: float, moved: dict | None = None) -> dict:
    out = {}
    for k, s in enumerate(STRATEGIES):
        t = 0.01 * (k + 1) * scale * (moved or {}).get(s, 1.0)
        out[("alexnet", s)] = (t, [t * 0.9, t, t * 1.2])
    return out


def test_level_removed_and_the_moved_case_found(tmp_path):
    a = _collection(tmp_path / "a", _times(1.0))
    # The whole machine 1.5x slower in B, and one strategy 1.3x more than that.
    b = _collection(tmp_path / "b", _times(1.5, {"operation": 1.3}))
    r = accuracy_floor.floor(a, b)
    med = r["median period (what sim_accuracy compares with)"]
    assert r["cases"] == 5 and r["left_out"] == []
    assert med["median"] == pytest.approx(0.0)
    assert med["worst"] == pytest.approx(0.3)
    assert med["worst_cases"][0][:3] == ("1x2", "alexnet", "operation")
    assert med["per_layout"]["1x2"][1] == pytest.approx(0.3)
    fastest = r["fastest period"]
    assert fastest["worst"] == pytest.approx(0.3)


def test_cases_with_other_strategy_files_left_out(tmp_path):
    a = _collection(tmp_path / "a", _times(1.0))
    b = _collection(tmp_path / "b", _times(1.0, {"searched": 2.0}),
                    files={("alexnet", "searched"): "another search's result"})
    r = accuracy_floor.floor(a, b)
    assert r["left_out"] == [["1x2", "alexnet", "searched"]]
    assert r["median period (what sim_accuracy compares with)"]["worst"] == pytest.approx(0.0)
    assert "left out" in accuracy_floor.text(r, a, b)


def test_bad_folders_named(tmp_path, capsys):
    a = _collection(tmp_path / "a", _times(1.0))
    assert accuracy_floor.main([a, str(tmp_path / "nowhere")]) == 2
    assert "nowhere/measured.json: no such file" in capsys.readouterr().err
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "measured.json").write_text(json.dumps(
        {"measured": {"1x2": {"cases": [{"app": "alexnet"}]}}}))
    with pytest.raises(accuracy_floor.FloorError, match="case 0 lacks"):
        accuracy_floor.read_cases(str(bad))
    (bad / "measured.json").write_text(json.dumps({"measured": {"two": {"cases": []}}}))
    with pytest.raises(accuracy_floor.FloorError, match="'two' is not RANKSxDEVICES"):
        accuracy_floor.read_cases(str(bad))
    (bad / "measured.json").write_text("{not json")
    with pytest.raises(accuracy_floor.FloorError, match="not readable JSON"):
        accuracy_floor.read_cases(str(bad))
    few = _collection(tmp_path / "few", {("alexnet", "data"): (0.01, [0.01])})
    with pytest.raises(accuracy_floor.FloorError, match="no layout and app"):
        accuracy_floor.floor(few, few)
