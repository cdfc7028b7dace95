"""A calibration's held-out error (strategy/heldout.py): k-fold refits of calibrate() over
the graphs its traces ran, each graph predicted by a refit without its fold's traces; the
judge's margin (heldout.margin, heldout.kept) is that estimate, its in-sample error only
where it has none, and the machine file's record keeps it. Real traces: three one-process
RNNLM --small runs of three strategies (2 logical devices)."""
import json

import pytest

from apps.common import run
from apps.rnnlm import APP as RNNLM
from strategy import cli
from strategy.calibration import (CalibrationError, Fit, calibrate, fit_from_files, load_runs,
                                  residuals)
from strategy.heldout import HeldOut, estimate, kept, margin
from strategy.machines import DEVICE_SPECS, cluster_model, load
from strategy.costs import Profile
from taskrt.trace import UNTRACED_PERIOD

ARGV = ["--small", "--iterations", "1", "--warmup", "1", "--quiet", "--devices-per-rank", "2"]


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """Three strategies' traces, each keeping an untraced period 1.3x its traced iteration
    (so that calibrate fits an iteration factor, whose rounds a refit runs too)."""
    folder = tmp_path_factory.mktemp("heldout")
    paths = [str(folder / f"{k}.json") for k in range(3)]
    run(RNNLM, ARGV + ["--trace", paths[0]], out=None)
    strategy = json.load(open(paths[0]))["otherData"]["soapflow"]["strategy"]
    for k, device in ((1, 1), (2, 0)):     # the softmax on one device, then the other
        ops = json.loads(json.dumps(strategy))["operators"]
        for name in ops:
            if name.startswith("softmax"):
                ops[name] = {"degrees": {d: 1 for d in ops[name]["degrees"]},
                             "devices": [device]}
        s_path = folder / f"s{k}.json"
        s_path.write_text(json.dumps(dict(strategy, operators=ops)))
        run(RNNLM, ARGV + ["--strategy", str(s_path), "--trace", paths[k]], out=None)
    for path, r in zip(paths, load_runs(paths)):
        data = json.load(open(path))
        data["otherData"]["soapflow"][UNTRACED_PERIOD] = {"period_s": 1.3 * r.measured_s,
                                                          "iterations": 3}
        json.dump(data, open(path, "w"))
    return paths


def base():
    import dataclasses
    return cluster_model("one", dataclasses.replace(DEVICE_SPECS["P100"], kind="cpu"), 1)


def test_each_strategy_is_predicted_by_calibrate_on_the_other_folds_traces_alone(traces):
    _, _, fit = calibrate(traces, base(), speed_reference=False)
    held = fit.heldout
    assert fit.factor != 1.0 and (held.graphs, held.folds) == (3, 3) and len(held.rows) == 3
    for k, path in enumerate(traces):     # 3 graphs, 3 folds: each left out alone
        _, _, alone = calibrate([p for p in traces if p != path], base(),
                                speed_reference=False, heldout=False)
        assert held.rows[k] == residuals(load_runs([path]), alone)[0]
    errs = sorted(abs(p / m - 1) for _, m, p in held.rows)
    assert held.error == errs[1] and "held-out estimate (3-fold over its 3" in fit.text()
    # the estimate leaves the calibration itself as it was
    _, _, plain = calibrate(traces, base(), speed_reference=False, heldout=False)
    assert plain.residuals == fit.residuals and plain.error == fit.error
    assert plain.heldout.error is None and "heldout=False" in plain.heldout.why


def test_two_strategies_give_no_estimate_and_the_judge_says_it_uses_the_in_sample_error(
        traces):
    _, _, fit = calibrate(traces[:2], base(), speed_reference=False)
    assert fit.heldout.error is None and fit.heldout.why == "its traces ran 2 strategies, " \
                                                              "3 needed"
    error, what = margin(fit)
    assert error == fit.error and "its own runs" in what and "2 strategies" in what
    assert "held-out error: none (its traces ran 2 strategies" in fit.text()


def test_the_cli_prints_the_estimate_and_writes_it_for_the_judge(traces, tmp_path, capsys):
    out = str(tmp_path / "mine")
    assert cli.main(["calibrate", *traces, "-o", out]) == 0
    assert "held-out estimate (3-fold over its 3 strategies" in capsys.readouterr().out
    again = fit_from_files(load(f"{out}.machine.json"), Profile.load(f"{out}.profile"))
    assert again.heldout.error is not None and again.heldout.graphs == 3
    assert margin(again)[0] == again.heldout.error
    assert cli.main(["calibrate", *traces, "-o", out, "--no-heldout"]) == 0
    assert "held-out error: none" in capsys.readouterr().out


def test_the_judge_keeps_data_parallel_within_the_held_out_error_not_the_in_sample_one():
    """AlexNet on 4 ranks, the eleventh collection: the searched strategy predicted 0.90x
    data parallel's time ran 1.32x it; its calibration's in-sample error (6%) kept it."""
    from apps.judge import verdict_text
    times = [(0.90, "searched"), (1.0, "data parallel")]
    fit = Fit({}, {}, {}, 0, error=0.06, heldout=HeldOut(0.15, 9, 3))
    assert kept(times, fit.error, "data parallel") == "searched"           # the old margin
    error, what = margin(fit)
    assert error == 0.15 and kept(times, error, "data parallel") == "data parallel"
    line = verdict_text([(t * 1e-3, n) for t, n in times], "m.json", margin(fit))
    assert "keeping data parallel: searched is predicted faster by less than the " \
           "calibration's error on strategies held out of its fit (15.0%, 3-fold over 9)" \
           in line
    old = Fit({}, {}, {}, 0, error=0.06)         # a file without the estimate
    assert "no held-out estimate: its file predates the held-out estimate: calibrate again" \
        in verdict_text(times, "m.json", margin(old))


def test_estimate_deals_graphs_round_robin_and_predicts_each_by_a_refit_without_it():
    groups = [[f"g{i}a", f"g{i}b"] for i in range(7)]
    fitted = []

    def refit(runs):
        fitted.append(set(runs))
        return set(runs)

    def rows_of(fit, group):
        assert not set(group) & fit             # never predicted by a fit that saw it
        return (group[0], 1.0, 1.0 + 0.01 * int(group[0][1]))
    held = estimate(groups, refit, rows_of)
    assert held.folds == 3 and held.graphs == 7 and len(fitted) == 3
    assert {r for r in groups[0] + groups[3] + groups[6]} == set(sum(groups, [])) - fitted[0]
    assert [r[0] for r in held.rows] == [g[0] for g in groups]          # in the given order
    assert held.error == pytest.approx(0.03)
    assert estimate(groups[:2], refit, rows_of).error is None

    def failing(runs):
        raise CalibrationError("no wake-ups in these runs")
    assert "the refit without fold 1 of 3 failed: no wake-ups" in estimate(
        groups, failing, rows_of).why


@pytest.mark.parametrize("bad", [{"error": -0.1, "graphs": 4, "folds": 3},
                                 {"error": float("nan"), "graphs": 4, "folds": 3},
                                 {"error": "x", "graphs": 4, "folds": 3},
                                 {"error": 0.1, "graphs": 2, "folds": 2},
                                 {"error": 0.1, "graphs": 4, "folds": 1},
                                 {"error": 0.1, "graphs": 4.0, "folds": 3}, 0.1])
def test_a_record_with_a_bad_held_out_estimate_is_refused_by_name(tmp_path, bad):
    model, profile = _written(tmp_path)
    record = json.loads((tmp_path / "m.json").read_text())
    record["calibration"]["from_traces"]["prediction"]["heldout"] = bad
    (tmp_path / "m.json").write_text(json.dumps(record))
    with pytest.raises(CalibrationError, match="malformed .*heldout.*calibrate again"):
        fit_from_files(load(str(tmp_path / "m.json")), profile)


def test_the_record_keeps_the_estimate_and_an_older_one_still_loads(tmp_path):
    model, profile = _written(tmp_path, HeldOut(0.125, 12, 3, rows=(("a", 1.0, 1.1),)))
    again = fit_from_files(model, profile)
    assert again.heldout == HeldOut(0.125, 12, 3)               # rows stay in the fit only
    record = json.loads((tmp_path / "m.json").read_text())
    del record["calibration"]["from_traces"]["prediction"]["heldout"]
    (tmp_path / "m.json").write_text(json.dumps(record))
    old = fit_from_files(load(str(tmp_path / "m.json")), profile)
    assert old.heldout is None and "predates" in margin(old)[1]
    none = HeldOut(None, 2, why="its traces ran 2 strategies, 3 needed")
    model, profile = _written(tmp_path, none)
    assert fit_from_files(model, profile).heldout == none


def _written(tmp_path, held=None):
    """The files of a calibration (test_fit_files' fit) with the held-out estimate `held`."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from test_fit_files import a_fit, two_gradients, written
    m, h, *_ = two_gradients()
    fit = a_fit(m, h.profile)
    fit.heldout = held
    return written(fit, tmp_path)
