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
    # one process: its one thread's work x the contention is the iteration, no factor
    # (a fitted one held the calibrating runs' noise: 1.06-1.17 on 1 process x 2 devices)
    assert len(fit.residuals) == 2 and fit.factor == 1.0
    assert "host costs per node kind" in fit.text() and "residuals" in fit.text()
    # each case named by its strategy file and the flags that change its graph (not cut
    # inside the file's folder, not the run's own --trace, --iterations), in full in the text
    assert [name for name, _, _ in fit.residuals] == [
        "rnnlm --devices-per-rank 2", "rnnlm --devices-per-rank 2 --strategy s.json"]
    assert "  rnnlm --devices-per-rank 2 --strategy s.json  measured" in fit.text()


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


def test_the_written_files_predict_as_the_calibration_does(traces, tmp_path):
    from strategy.calibration import fit_from_files, predict
    model, profile, fit = calibrate(traces, base())
    model.save(str(tmp_path / "m.json"))
    profile.save(str(tmp_path / "p.profile"))
    again = fit_from_files(load(str(tmp_path / "m.json")), Profile.load(str(tmp_path /
                                                                            "p.profile")))
    for r in load_runs(traces):
        assert predict(again, r.graph, r.int_ranges, 1, 2) == pytest.approx(
            predict(fit, r.graph, r.int_ranges, 1, 2), rel=1e-9)


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
    whose time is long beside the preemption slices is priced by its events / the load, a
    rare long wait shared by the run's long keys (insitu.pooled_work), with the median of
    its events in the runs where it is short, weighted by their number."""
    import statistics
    from strategy.insitu import insitu_profile, run_durations, slice_length, work_durations
    from strategy.reslicing import reslicing_time
    runs = load_runs(traces)
    reslicing_time(runs)          # as calibrate does: the views' time out of the events
    medians = insitu_profile(runs)[0]            # per key, before any load is applied
    slice_s = slice_length(run_durations(runs), medians)
    # loads at which the longest key is long beside the slices the runs saw (a key of w s
    # is long at a load c when w (c - 1) / slice >= 1/4), whatever the slice was
    longest = max(medians.get(k, "cpu").seconds for k in medians.keys("cpu"))
    low = 1.0 + 1.01 * slice_s / (4 * longest) + 1.0
    loads = {traces[0]: low, traces[1]: low + 2.0}
    # the runs' recorded times, not put at one speed of the machine (speedref.py)
    _, _, fit = calibrate(traces, base(), factor=False, loads=loads, speed_reference=False)
    assert fit.contention == pytest.approx(low + 1.0) and fit.slice_s == slice_s
    per_key: dict = {}
    short: dict = {}
    for r in runs:
        c = loads[r.path]
        # no preempted event seen (a quiet machine): no slice, so no key is long
        limit = slice_s / (4 * (c - 1)) if slice_s > 0 else float("inf")
        long = {key: ts for key, ts in work_durations(r).items()
                if medians.get(key, "cpu").seconds >= limit}
        # each event capped at c x the key's median + 2 slices, what the caps cut off
        # shared by the long keys in proportion to their capped events
        capped = {k: [min(t, c * medians.get(k, "cpu").seconds + 2 * slice_s) for t in ts]
                  for k, ts in long.items()}
        kept = sum(map(sum, capped.values()))
        share = sum(map(sum, long.values())) / kept if kept else 1.0
        for key, ts in capped.items():
            per_key.setdefault(key, []).extend([statistics.fmean(ts) * share / c] * len(ts))
        for key, ts in work_durations(r).items():
            if key not in long:              # short in this run: its events' median
                short.setdefault(key, []).extend(ts)
    assert per_key or slice_s == 0       # the longest key is long where the OS took slices
    for key in {n.cost_key for r in runs for n in r.graph.nodes if n.kind == "task"}:
        rest = short.get(key, [])
        typical = [statistics.median(rest)] * len(rest) if rest else []
        want = statistics.fmean(per_key[key] + typical) if key in per_key else \
            medians.get(key, "cpu").seconds
        assert fit.work[1].get(key, "cpu").seconds == pytest.approx(want, rel=1e-12)


def test_traces_record_the_os_load_and_calibrate_uses_it(traces):
    """A --trace run records each rank's CPU and run-queue wait over its traced iteration;
    without `loads`, calibrate takes the contention from those records (their median over
    the runs), as it would from loads the caller measured."""
    from taskrt.trace import LOAD_EVENT, contention_of, sched_times
    if sched_times() is None:
        pytest.skip("no /proc/thread-self/schedstat here: traces record no run-queue wait")
    runs = load_runs(traces)
    for r in runs:
        marks = [e["args"] for e in r.events if e.get("name") == LOAD_EVENT]
        assert len(marks) == r.ranks and all(m["cpu_s"] > 0 for m in marks)
        assert r.load == contention_of(marks) and r.load >= 1.0
    _, _, fit = calibrate(traces, base(), factor=False)
    _, _, given = calibrate(traces, base(), factor=False,
                            loads={r.path: r.load for r in runs})
    assert fit.load_source == "the OS's count recorded in the traces"
    assert given.load_source == "the OS's count"
    assert fit.contention == given.contention == pytest.approx(
        (runs[0].load + runs[1].load) / 2)
    assert "recorded in the traces" in fit.text()


def test_a_malformed_load_record_is_refused_by_name(traces, tmp_path):
    from taskrt.trace import LOAD_EVENT
    data = json.load(open(traces[0]))
    for e in data["traceEvents"]:
        if e.get("name") == LOAD_EVENT:
            e["args"]["cpu_s"] = "lots"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(CalibrationError, match=f"bad.json: its '{LOAD_EVENT}' record"):
        load_runs([str(bad)])


def test_several_traced_runs_of_one_strategy_are_one_case(traces, tmp_path):
    """Traced runs of one graph are fitted as one case: its measured iteration is the
    median of theirs (one traced iteration is one noisy sample), so the iteration factor
    is the median over strategies, not over runs, and a strategy traced three times does
    not outvote one traced once."""
    import statistics
    from strategy.calibration import residuals
    from strategy.preemption import expected_makespan  # noqa: F401  (predict's engine)
    data = json.load(open(traces[0]))
    paths = []
    for k in (2.0, 3.0):        # the same run, its events k times as long (a slower run)
        other = json.loads(json.dumps(data))
        for e in other["traceEvents"]:
            if e.get("ph") == "X":
                e["ts"], e["dur"] = e["ts"] * k, e["dur"] * k
        paths.append(str(tmp_path / f"slow{k}.json"))
        json.dump(other, open(paths[-1], "w"))
    runs = load_runs([traces[0], *paths, traces[1]])
    _, _, fit = calibrate([traces[0], *paths, traces[1]], base(), factor=False,
                          speed_reference=False)         # the runs' times as recorded
    assert len(fit.residuals) == 2
    spans = [r.measured_s for r in runs]
    assert fit.residuals[0][1] == pytest.approx(statistics.median(spans[:3]))
    assert fit.residuals[1][1] == pytest.approx(spans[3])
    assert "(3 runs)" in fit.residuals[0][0]
    # predicted once per case, as each of its runs would be
    assert [p for _, _, p in residuals(runs[:1], fit)] == [fit.residuals[0][2]]


def test_a_trace_s_untraced_period_is_what_its_residual_measures(traces, tmp_path):
    """A trace whose run timed untraced iterations before its traced one keeps their period
    (taskrt.trace.UNTRACED_PERIOD); the residual (and so the iteration factor) compares it
    with the untraced prediction; a trace without one, its traced iteration with the traced
    prediction; a malformed one is refused by name."""
    from strategy.calibration import predict
    from taskrt.trace import UNTRACED_PERIOD
    data = json.load(open(traces[0]))
    data["otherData"]["soapflow"][UNTRACED_PERIOD] = {"period_s": 0.0123, "iterations": 2}
    kept = str(tmp_path / "kept.json")
    json.dump(data, open(kept, "w"))
    runs = load_runs([kept, traces[1]])
    assert [r.untraced_s for r in runs] == [0.0123, None]
    _, _, fit = calibrate([kept, traces[1]], base(), factor=False, speed_reference=False)
    (_, m0, p0), (_, m1, p1) = fit.residuals
    r0, r1 = runs
    assert m0 == 0.0123 and p0 == predict(fit, r0.graph, r0.int_ranges, r0.ranks, r0.per_rank,
                                          traced=False)
    assert m1 == r1.measured_s and p1 == predict(fit, r1.graph, r1.int_ranges, r1.ranks,
                                                 r1.per_rank, traced=True)
    data["otherData"]["soapflow"][UNTRACED_PERIOD] = {"period_s": -1}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(CalibrationError, match=f"bad.json: its '{UNTRACED_PERIOD}' record"):
        load_runs([str(bad)])


def test_one_process_fits_a_factor_only_where_every_trace_keeps_an_untraced_period(
        traces, tmp_path):
    """One process: the factor is fitted to the untraced periods (apart from the traced
    iteration whose events price the keys), never to the traced iteration itself."""
    from strategy.calibration import predict
    from taskrt.trace import UNTRACED_PERIOD
    _, _, plain = calibrate(traces, base(), factor=False, speed_reference=False)
    runs = load_runs(traces)
    kept = []
    for k, (path, r) in enumerate(zip(traces, runs)):
        want = 1.5 * predict(plain, r.graph, r.int_ranges, r.ranks, r.per_rank)
        data = json.load(open(path))
        data["otherData"]["soapflow"][UNTRACED_PERIOD] = {"period_s": want, "iterations": 3}
        kept.append(str(tmp_path / f"kept{k}.json"))
        json.dump(data, open(kept[-1], "w"))
    _, _, fit = calibrate(kept, base(), speed_reference=False)
    assert fit.factor == pytest.approx(1.5, rel=0.05)
    _, _, fit = calibrate([kept[0], traces[1]], base(), speed_reference=False)
    assert fit.factor == 1.0                  # one trace keeps none: no factor
