"""`python -m strategy calibrate` on real recorded runs: two one-process RNNLM --small runs
(2 logical devices; data parallel and another strategy) with --trace. The fit has host costs
for the kinds the runs have, in-situ times for every task key, residuals for both runs; the
files it writes are what --machine and --profile read, and simulating the recorded graphs
with them gives the printed residuals. Bad input: GPU traces."""
import json

import pytest

from apps.common import run
from apps.rnnlm import APP as RNNLM
from strategy import cli
from strategy.calibration import CalibrationError, calibrate, load_runs
from strategy.costs import Profile
from strategy.machines import DEVICE_SPECS, cluster_model, load

ARGV = ["--small", "--iterations", "1", "--warmup", "1", "--quiet"]


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    folder = tmp_path_factory.mktemp("calib")
    paths = [str(folder / "dp.json"), str(folder / "other.json")]
    run(RNNLM, ARGV + ["--devices-per-rank", "2", "--trace", paths[0]], out=None)
    # a second strategy: the first run's strategy with the softmax on device 1 only
    data = json.load(open(paths[0]))
    strategy = data["otherData"]["soapflow"]["strategy"]
    s_path = str(folder / "s.json")
    ops = strategy["operators"]
    for name in ops:
        if name.startswith("softmax"):
            ops[name] = {"degrees": {d: 1 for d in ops[name]["degrees"]}, "devices": [1]}
    json.dump(strategy, open(s_path, "w"))
    run(RNNLM, ARGV + ["--devices-per-rank", "2", "--strategy", s_path, "--trace", paths[1]],
        out=None)
    return paths


def base():
    import dataclasses
    return cluster_model("one", dataclasses.replace(DEVICE_SPECS["P100"], kind="cpu"), 1)


def test_calibrate_fits_host_costs_and_task_times(traces):
    model, profile, fit = calibrate(traces, base())
    assert {"task", "copy", "reduce"} <= set(model.host_costs)
    assert all(c.seconds > 0 for c in model.host_costs.values())
    runs = load_runs(traces)
    keys = {n.cost_key for r in runs for n in r.graph.nodes if n.kind == "task"}
    assert keys == set(profile.keys("cpu"))
    assert len(fit.residuals) == 2 and fit.factor > 0
    assert "host costs per node kind" in fit.text() and "residuals" in fit.text()


def test_cli_writes_files_the_simulator_reads(traces, tmp_path, capsys):
    out = str(tmp_path / "mine")
    assert cli.main(["calibrate", *traces, "-o", out]) == 0
    text = capsys.readouterr().out
    assert "residuals" in text and f"wrote {out}.machine.json" in text
    m = load(f"{out}.machine.json")
    assert m.host_costs and "from_traces" in m.calibration
    assert len(Profile.load(f"{out}.profile").keys("cpu")) > 0
    # the app simulates with them
    res = run(RNNLM, ["--small", "--devices-per-rank", "2", "--simulate", "--machine",
                      f"{out}.machine.json", "--profile", f"{out}.profile", "--quiet"],
              out=None)
    assert res.iteration_time > 0


def test_gpu_traces_are_refused(traces, tmp_path, capsys):
    data = json.load(open(traces[0]))
    other = dict(data)
    other["otherData"] = {"soapflow": dict(data["otherData"]["soapflow"],
                                            device_kind="cuda")}
    gpu = tmp_path / "gpu.json"
    gpu.write_text(json.dumps(other))
    with pytest.raises(CalibrationError, match="recorded on cuda devices"):
        load_runs([str(gpu)])
    assert cli.main(["calibrate", str(gpu), "-o", str(tmp_path / "x")]) == 2
    assert "recorded on cuda devices" in capsys.readouterr().err


def test_loads_counted_by_the_os_set_the_contention_and_long_keys_work(traces):
    """With each run's load (wall / CPU seconds), the contention is their median and a key
    whose time is long beside the preemption slices is priced by its events / the load."""
    import statistics
    from strategy.replay import task_durations
    _, _, fit0 = calibrate(traces, base(), factor=False)
    loads = {traces[0]: 3.0, traces[1]: 5.0}
    _, _, fit = calibrate(traces, base(), factor=False, loads=loads)
    assert fit.contention == 4.0
    runs = load_runs(traces)
    per_key: dict = {}
    for r in runs:
        c = loads[r.path]
        # no preempted event seen (a quiet machine): no slice, so no key is long
        limit = fit.slice_s / (4 * (c - 1)) if fit.slice_s > 0 else float("inf")
        for key, ts in task_durations(r.graph, r.events).items():
            if fit0.work[1].get(key, "cpu").seconds >= limit:
                per_key.setdefault(key, []).extend(t / c for t in ts)
    assert per_key or fit.slice_s == 0   # some key is long where the OS took slices
    for key in {n.cost_key for r in runs for n in r.graph.nodes if n.kind == "task"}:
        want = statistics.fmean(per_key[key]) if key in per_key else \
            fit0.work[1].get(key, "cpu").seconds
        assert fit.work[1].get(key, "cpu").seconds == pytest.approx(want, rel=1e-12)
