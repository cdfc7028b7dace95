"""A calibration's whole prediction from the two files it writes (strategy/calibration.py
prediction_record / fit_from_files): the machine file's calibration record keeps what the
files' host costs and task times do not (ranks' speeds, wake-ups, gradient buckets' waits,
contention of ranks side by side), so a search given the files predicts as the calibration
does (apps/judge.py). Hand-built graph with exact times (test_gradbuckets.two_gradients)."""
import json
import sys
from pathlib import Path

import pytest

from strategy.calibration import (CalibrationError, Fit, at_contention, fit_from_files,
                                  judged, kept, predict, prediction_record, residual_error)
from strategy.costs import Profile
from strategy.machines import load
from strategy.wakeups import SleepSchedule

sys.path.insert(0, str(Path(__file__).parent))
from test_gradbuckets import HOST, two_gradients  # noqa: E402


def a_fit(m, profile) -> Fit:
    """A fit of 3 ranks with every part predict() uses set (not calibrate()'s defaults)."""
    return Fit(dict(HOST), {}, {}, 2, work=(m, profile), ranks=3, contention=1.3,
               factor=1.2, slice_s=1e-3, background=0.4, waiting=0.5, cores=2,
               sleep=SleepSchedule(1e-4, 5e-4, 2e-3, 1e-4),
               collective_s={2: (6e-3, 1e-3), 3: (2e-3, 0.0)},
               speeds=[(1.0, 1.4, 0.9), (1.2, 1.0, 1.0)], error=0.04, repetition=(-0.3, 2.5))


def written(fit, tmp_path, layout=(3, 1)):
    """The files calibrate() writes for fit (and the cli saves), read back."""
    model, profile = at_contention(fit, fit.contention)
    record = {"from_traces": {"layout": list(layout), "prediction": prediction_record(fit)}}
    model.with_host_costs(model.host_costs, record).save(str(tmp_path / "m.json"))
    profile.save(str(tmp_path / "p.profile"))
    return load(str(tmp_path / "m.json")), Profile.load(str(tmp_path / "p.profile"))


def test_the_files_predict_as_the_calibration_does(tmp_path):
    m, h, *_ = two_gradients()
    fit = a_fit(m, h.profile)
    again = fit_from_files(*written(fit, tmp_path))
    assert again.speeds == fit.speeds and again.collective_s == fit.collective_s
    assert again.sleep == fit.sleep and again.background == fit.background
    assert again.error == fit.error == 0.04 and again.repetition == fit.repetition
    expected = predict(fit, h.graph, {}, 3, 1)
    assert predict(again, h.graph, {}, 3, 1) == pytest.approx(expected, rel=1e-9)
    # and it is not what the files alone simulate (the search's smooth model)
    bare = Fit(dict(HOST), {}, {}, 2, work=fit.work, ranks=3, contention=1.3, factor=1.2)
    assert abs(predict(bare, h.graph, {}, 3, 1) - expected) > 1e-4
    assert judged(again, {"a": h.graph, "b": h.graph}, {}, 3, 1) == [(expected, "a"),
                                                                     (expected, "b")]


def test_a_model_without_the_record_has_no_fit_and_a_foreign_profile_is_refused(tmp_path):
    m, h, *_ = two_gradients()
    model, profile = written(a_fit(m, h.profile), tmp_path)
    assert fit_from_files(m, profile) is None                 # no calibration record
    other = Profile(meta={"contention": 1.0})
    with pytest.raises(CalibrationError, match="not the one its calibration wrote"):
        fit_from_files(model, other)
    model.calibration["from_traces"]["prediction"]["speeds"] = "fast"
    with pytest.raises(CalibrationError, match="malformed"):
        fit_from_files(model, profile)


def test_a_search_keeps_data_parallel_unless_another_is_faster_by_more_than_the_error():
    dp, s = "data parallel", "searched"
    assert kept([(0.99, s), (1.0, dp)], 0.05, dp) == dp          # within the error
    assert kept([(0.90, s), (1.0, dp)], 0.05, dp) == s           # beyond it
    assert kept([(0.99, s), (1.0, dp)], 0.0, dp) == s            # no error: the fastest
    assert kept([(1.0, dp), (1.1, s)], 0.05, dp) == dp
    assert kept([(0.99, s), (1.0, "expert")], 0.05, dp) == s     # no data parallel judged
    assert kept([(0.9, "expert"), (0.99, s), (1.0, dp)], 0.05, dp) == "expert"
    assert kept([(0.97, "expert"), (0.98, s), (1.0, dp)], 0.05, dp) == dp
    assert residual_error([("a", 1.0, 1.1), ("b", 2.0, 1.8), ("c", 1.0, 1.0)]) == \
        pytest.approx(0.1)
    assert residual_error([]) == 0.0


@pytest.mark.parametrize("error", [-0.1, "nan", "inf", "x"])
def test_a_record_with_a_bad_error_is_refused_by_name(tmp_path, error):
    m, h, *_ = two_gradients()
    model, profile = written(a_fit(m, h.profile), tmp_path)
    record = json.loads((tmp_path / "m.json").read_text())
    record["calibration"]["from_traces"]["prediction"]["error"] = \
        float(error) if error in ("nan", "inf") else error
    (tmp_path / "m.json").write_text(json.dumps(record))
    with pytest.raises(CalibrationError, match="malformed .*error.*calibrate again"):
        fit_from_files(load(str(tmp_path / "m.json")), profile)


@pytest.mark.parametrize("repetition", [[-0.2], [-0.2, 0], ["a", 1.0], [float("nan"), 1.0], 3])
def test_a_record_with_a_bad_repetition_is_refused_by_name(tmp_path, repetition):
    m, h, *_ = two_gradients()
    model, profile = written(a_fit(m, h.profile), tmp_path)
    record = json.loads((tmp_path / "m.json").read_text())
    record["calibration"]["from_traces"]["prediction"]["repetition"] = repetition
    (tmp_path / "m.json").write_text(json.dumps(record))
    with pytest.raises(CalibrationError, match="malformed .*repetition.*calibrate again"):
        fit_from_files(load(str(tmp_path / "m.json")), profile)
