"""The machine's speed reference (strategy/speedref.py) and a calibration at one speed: a
real one-process RNNLM --small run with --trace, and the same run as if the machine had run
it at half the speed (every event twice as long, its reference twice as long). Calibrated
from the slow copy and asked about a run at the fast copy's reference, the prediction is the
fast copy's; the events of runs at different speeds are put at one; a trace's reference of
another kernel mix, or malformed, is refused."""
import json

import pytest

from apps.common import run
from apps.rnnlm import APP as RNNLM
from strategy.calibration import CalibrationError, calibrate, load_runs, predict
from strategy.machines import DEVICE_SPECS, cluster_model
from strategy.speedref import (REFERENCE_EVENT, at_reference_speed, add_to_trace, reference_s,
                               trace_reference)

ARGV = ["--small", "--iterations", "1", "--warmup", "1", "--quiet", "--devices-per-rank", "2"]
REF = 0.004          # the fast copy's reference, s


def base():
    import dataclasses
    return cluster_model("one", dataclasses.replace(DEVICE_SPECS["P100"], kind="cpu"), 1)


def slowed(path: str, out: str, k: float) -> str:
    """A copy of a trace as if the machine had run k x slower: every event's stamps and the
    load records' seconds times k (their ratios kept), its reference times k."""
    trace = json.load(open(path))
    for e in trace["traceEvents"]:
        if e.get("ph") == "X":
            e["ts"] *= k
            e["dur"] *= k
        elif e.get("name") == "soapflow_load":
            for f in ("wall_s", "cpu_s", "wait_s"):
                if isinstance(e["args"].get(f), (int, float)):
                    e["args"][f] *= k
        elif e.get("name") == REFERENCE_EVENT:
            e["args"]["before_s"] *= k
            e["args"]["after_s"] *= k
    json.dump(trace, open(out, "w"))
    return out


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    folder = tmp_path_factory.mktemp("speedref")
    fast = str(folder / "fast.json")
    run(RNNLM, ARGV + ["--trace", fast], out=None)
    add_to_trace(fast, [{"before_s": REF, "after_s": REF}])
    return fast, slowed(fast, str(folder / "slow.json"), 2.0)


def test_the_reference_is_cpu_seconds_of_the_kernel_mix():
    import torch
    threads = torch.get_num_threads()
    t = reference_s(repeats=3)
    assert 0 < t < 1.0 and torch.get_num_threads() == threads
    with pytest.raises(ValueError, match="repeats"):
        reference_s(repeats=0)


def test_a_trace_keeps_every_rank_s_reference(tmp_path):
    path = str(tmp_path / "t.json")
    json.dump({"traceEvents": [{"ph": "X", "name": "a", "ts": 0, "dur": 1}]}, open(path, "w"))
    add_to_trace(path, [{"before_s": 1.0, "after_s": 3.0}, {"before_s": 2.0, "after_s": 9.0}])
    events = json.load(open(path))["traceEvents"]
    assert trace_reference(events) == 2.5          # the median of the four
    assert [e["pid"] for e in events if e["name"] == REFERENCE_EVENT] == [0, 1]
    add_to_trace(path, [{"before_s": 1.0, "after_s": 1.0}])       # replaces, not adds
    assert trace_reference(json.load(open(path))["traceEvents"]) == 1.0
    assert trace_reference([{"ph": "X", "name": "a"}]) is None
    with pytest.raises(ValueError, match="after_s"):
        add_to_trace(path, [{"before_s": 1.0, "after_s": 0.0}])
    other = [{"ph": "M", "name": REFERENCE_EVENT,
              "args": {"before_s": 1.0, "after_s": 1.0, "workload": "another"}}]
    with pytest.raises(ValueError, match="not comparable"):
        trace_reference(other)


def test_a_slow_moment_s_trace_predicts_a_fast_moment_s_run(traces):
    fast, slow = traces
    fit_fast = calibrate([fast], base())[2]
    fit_slow = calibrate([slow], base())[2]
    assert fit_fast.reference_s == pytest.approx(REF)
    assert fit_slow.reference_s == pytest.approx(2 * REF)
    r = load_runs([fast])[0]
    want = predict(fit_fast, r.graph, r.int_ranges, 1, 2, reference_s=REF)
    assert want == pytest.approx(predict(fit_fast, r.graph, r.int_ranges, 1, 2))
    got = predict(fit_slow, r.graph, r.int_ranges, 1, 2, reference_s=REF)
    # the device model's memory time in local copies is not the trace's: not exactly linear
    assert got == pytest.approx(want, rel=0.03)
    assert predict(fit_slow, r.graph, r.int_ranges, 1, 2) > 1.6 * want   # without it
    # the same at the slow moment's speed
    assert predict(fit_fast, r.graph, r.int_ranges, 1, 2, reference_s=2 * REF) == \
        pytest.approx(2 * want, rel=0.03)


def test_runs_at_different_speeds_are_put_at_one(traces):
    runs = load_runs(list(traces))
    spans = [r.measured_s for r in runs]
    assert spans[1] == pytest.approx(2 * spans[0])
    assert at_reference_speed(runs) == pytest.approx(1.5 * REF)   # the median reference
    assert runs[0].measured_s == pytest.approx(runs[1].measured_s)
    assert runs[0].measured_s == pytest.approx(1.5 * spans[0])
    durs = [[e["dur"] for e in r.events if e.get("ph") == "X"] for r in runs]
    assert durs[0] == pytest.approx(durs[1])
    # without: a calibration of both keeps the recorded times, and has no reference
    fit = calibrate(list(traces), base(), speed_reference=False)[2]
    assert fit.reference_s is None and "speed reference" not in fit.text()
    assert "speed reference" in calibrate(list(traces), base())[2].text()


def test_a_run_s_reference_needs_a_calibration_with_one(traces, tmp_path):
    fast, _ = traces
    bare = json.load(open(fast))
    bare["traceEvents"] = [e for e in bare["traceEvents"] if e.get("name") != REFERENCE_EVENT]
    path = str(tmp_path / "bare.json")
    json.dump(bare, open(path, "w"))
    fit = calibrate([path], base())[2]
    assert fit.reference_s is None
    # one run without a reference: none of the runs is moved
    runs = load_runs([fast, path])
    before = [r.measured_s for r in runs]
    assert at_reference_speed(runs) is None and [r.measured_s for r in runs] == before
    r = runs[0]
    with pytest.raises(CalibrationError, match="recorded none"):
        predict(fit, r.graph, r.int_ranges, 1, 2, reference_s=REF)
    with pytest.raises(CalibrationError, match="positive"):
        predict(calibrate([fast], base())[2], r.graph, r.int_ranges, 1, 2, reference_s=0.0)


def test_the_written_files_keep_the_reference(traces, tmp_path):
    from strategy.calibration import fit_from_files
    from strategy.costs import Profile
    from strategy.machines import load
    model, profile, fit = calibrate([traces[1]], base())
    model.save(str(tmp_path / "m.json"))
    profile.save(str(tmp_path / "p.profile"))
    again = fit_from_files(load(str(tmp_path / "m.json")), Profile.load(str(tmp_path /
                                                                            "p.profile")))
    assert again.reference_s == pytest.approx(2 * REF)
    r = load_runs([traces[0]])[0]
    assert predict(again, r.graph, r.int_ranges, 1, 2, reference_s=REF) == pytest.approx(
        predict(fit, r.graph, r.int_ranges, 1, 2, reference_s=REF))


def test_a_malformed_reference_in_a_trace_is_refused_by_name(traces, tmp_path):
    bad = json.load(open(traces[0]))
    for e in bad["traceEvents"]:
        if e.get("name") == REFERENCE_EVENT:
            e["args"]["before_s"] = "fast"
    path = str(tmp_path / "bad.json")
    json.dump(bad, open(path, "w"))
    with pytest.raises(CalibrationError, match="before_s"):
        load_runs([path])
