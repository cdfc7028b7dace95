"""The accuracy benchmark's pure parts (relative errors, ranks, Spearman, summaries), and the
closed form its one-process runs rely on: logical devices of one rank run one at a time."""
import math

import pytest

from bench.sim_accuracy import ranks, relative_errors, spearman, summary
from parallel_ops.lowering import lower
from strategy import standard
from strategy.costs import CostModel
from strategy.costs.app_profile import load_app
from strategy.machines import cluster_model
from strategy.logical_devices import shared as shared_devices
from strategy.machines.specs import DeviceSpec
from strategy.simulator import NodeTimer, simulate
from taskrt import plan


def test_relative_errors():
    assert relative_errors([1.1, 0.5], [1.0, 1.0]) == pytest.approx([0.1, 0.5])
    with pytest.raises(ValueError, match="2 predictions for 1"):
        relative_errors([1, 2], [1])
    with pytest.raises(ValueError, match="positive"):
        relative_errors([1], [0.0])


def test_ranks_average_ties():
    assert ranks([30, 10, 20]) == [3, 1, 2]
    assert ranks([5, 1, 5, 0]) == [3.5, 2, 3.5, 1]


def test_spearman_closed_forms():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [9, 7, 5, 1]) == pytest.approx(-1.0)
    # one swapped pair of 4: 1 - 6 * 2 / (4 * 15) = 0.8
    assert spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
    with pytest.raises(ValueError, match="at least 2"):
        spearman([1], [1])


def test_summary():
    cases = [{"predicted_s": p, "measured_s": m} for p, m in ((1.0, 1.0), (2.4, 2.0), (2.7, 3.0))]
    s = summary(cases)
    assert s["median_error"] == pytest.approx(0.1)
    assert s["worst_error"] == pytest.approx(0.2)
    assert s["spearman"] == pytest.approx(1.0)


SPEC = DeviceSpec("cpu", 1e11, 1e9, 5e10, 1e10, 1 << 34, 5e-6)


@pytest.mark.filterwarnings("ignore::UserWarning")    # analytic costs: no profile here
def test_one_rank_runs_its_logical_devices_one_at_a_time():
    base = cluster_model("one", SPEC, 1)
    m = shared_devices(base, 2)
    net = load_app("rnnlm", ["--small"], 2)
    opt = net.optimizer
    s = standard.data_parallel(net.model, [0, 1])
    machine = m.taskrt_machine()
    lowered = lower(net.model, s, machine, opt)
    graph = plan(lowered.launches, machine, initial=lowered.initial)
    costs = CostModel()
    timer = NodeTimer(m, costs)
    total = sum(timer.timing(n)[0] for n in graph.nodes)
    assert simulate(graph, m, costs).makespan == pytest.approx(total)
    two = cluster_model("two", SPEC, 2)            # two ranks overlap: faster
    assert simulate(graph, two, costs).makespan < 0.75 * total


def case(app, ranks, strategy, measured, predicted, spread=0.0, at_load=None):
    return {"app": app, "ranks": ranks, "layout": f"{ranks}x{2 // ranks}",
            "strategy": strategy, "measured_s": measured,
            "spread_s": (measured - spread / 2, measured + spread / 2),
            "predicted_s": predicted, "error": (predicted - measured) / measured,
            "without_factor_s": predicted * 0.5, "iteration_factor": 2.0,
            "uncalibrated_s": predicted * 0.2, "runs_s": [[measured]] * 3,
            "at_load_s": at_load}


def test_spread_is_run_to_run_or_the_interquartile_range_of_one_run():
    from bench.sim_accuracy import spread
    assert spread([[1.0, 2.0, 3.0, 4.0, 5.0]]) == (2.0, 4.0)
    assert spread([[7.0]]) == (7.0, 7.0)
    # repeated runs: the lowest and highest of their medians
    assert spread([[1.0, 2.0, 9.0], [3.0, 4.0, 5.0], [0.5, 1.5, 1.6]]) == (1.5, 4.0)


def test_a_case_is_measured_by_its_runs_periods_where_they_recorded_them():
    """AlexNet searched on 2 ranks (2026-12-05 06:40): rank 0's iterations alternate short
    and long, their medians' median (8.0 ms) is not the runs' iteration; their periods are.
    Collections without periods keep the medians' median."""
    from bench.sim_accuracy import measurement, spread
    runs = [[0.0078, 0.0144, 0.0070], [0.0073, 0.0080, 0.0159], [0.0097, 0.0255, 0.0192]]
    old = {"measured_s": 0.0080, "runs_s": runs}
    assert measurement(old) == (0.0080, spread(runs)) == (0.0080, (0.0078, 0.0192))
    assert measurement(dict(old, periods_s=[0.0112, 0.0105, 0.0183])) == (
        0.0112, (0.0105, 0.0183))
    # one run: no run-to-run spread; its iterations' quartiles stand in
    assert measurement({"measured_s": 0.0105, "runs_s": runs[:1], "periods_s": [0.0105]}) \
        == (0.0105, spread(runs[:1]))


def test_contention_since_is_wall_over_cpu_time():
    """(CPU + run-queue wait) / CPU of this thread, from /proc/self/schedstat."""
    from bench._sim_accuracy_runs import contention_since
    from taskrt.trace import sched_times
    before = sched_times()
    if before is None:
        pytest.skip("no /proc/self/schedstat here")
    x = 0
    for i in range(200000):
        x += i
    c = contention_since(before)
    assert c is not None and c >= 1.0
    assert contention_since((before[0] + 1e9, before[1])) is None    # no CPU time: none


def test_pairs_count_only_clearly_separated_ones_of_one_app_and_layout():
    from bench.sim_accuracy import ordered_pairs
    cases = [case("a", 1, "x", 1.0, 1.0, 0.1), case("a", 1, "y", 2.0, 0.5, 0.1),
             case("a", 1, "z", 1.05, 3.0, 0.1),     # within x's spread: not counted with x
             case("a", 2, "x", 5.0, 9.0), case("b", 1, "x", 9.0, 1.0)]
    total, right, wrong = ordered_pairs(cases)
    # separated: (x, y) wrong, (y, z) wrong; (x, z) differ by 0.05 < 0.2
    assert (total, right) == (2, 0)
    assert wrong == ["a 1x2 x/y", "a 1x2 y/z"]


def test_report_rows_say_errors_pairs_and_the_factor():
    from bench.sim_accuracy import report
    cases = [case("a", 1, "x", 1.0, 1.1, 0.01, 1.0), case("a", 1, "y", 2.0, 1.8, 0.01, 2.1),
             case("a", 2, "x", 1.0, 0.8, 0, 1.3), case("a", 2, "y", 2.0, 2.0, 0, 2.0)]
    out = report(cases, {}, {}, quick=True, residuals={"1 rank, fold 0": [("r", 1.0, 1.1)]})
    rows = {metric: (value, note) for metric, value, note in out["rows"]}
    assert rows["median relative error, held-out strategies"][0] == "10.0%"
    assert rows["worst relative error, held-out strategies"][0] == "20.0%"
    assert rows["clearly separated pairs ordered right"][0] == "2 of 2"
    assert rows["at the measured load: median / worst error"][0] == "2.5% / 30.0%"
    assert rows["at the measured load: separated pairs ordered right"][0] == "2 of 2"
    value, note = rows["calibrated without the iteration factor: median / worst error"]
    assert value == "52.5% / 60.0%" and "1 process x 2 devices 2.00, 2 ranks 2.00" in note
    assert rows["uncalibrated (profiler times, no host costs): median / worst error"][0] == \
        "81.0% / 84.0%"
    assert rows["calibration residuals (traced runs it was fitted to)"][0] == \
        "median 10.0%, worst 10.0%"
    value, note = rows["a 1 process x 2 devices: median / worst error"]
    assert value == "10% / 10%"
    assert note.endswith("x 1100.0 / 1000.0 (995.0-1005.0) +10%, at load 1000.0 +0%; "
                         "y 1800.0 / 2000.0 (1995.0-2005.0) -10%, at load 2100.0 +5%")


def test_searched_vs_data_parallel_says_whether_a_predicted_win_held():
    from bench.sim_accuracy import searched_vs_data
    cases = [case("a", 1, "data", 1.0, 1.0), case("a", 1, "searched", 0.9, 0.8),
             case("b", 1, "data", 1.0, 1.0), case("b", 1, "searched", 1.1, 0.8),
             case("c", 1, "data", 1.0, 1.0), case("c", 1, "searched", 0.9, 1.2),
             case("d", 1, "searched", 1.0, 1.0)]          # no data parallel case: left out
    assert searched_vs_data(cases) == [
        "a 1x2: predicted 0.80x, measured 0.90x HELD",
        "b 1x2: predicted 0.80x, measured 1.10x NOT HELD",
        "c 1x2: predicted 1.20x, measured 0.90x"]


def test_report_counts_the_predicted_wins_that_held():
    from bench.sim_accuracy import report
    cases = [case("a", 1, "data", 1.0, 1.0, 0, 1.0), case("a", 1, "searched", 0.9, 0.8, 0, 0.8),
             case("b", 1, "data", 1.0, 1.0, 0, 1.0), case("b", 1, "searched", 1.1, 0.8, 0, 0.8)]
    rows = {m: v for m, v, _ in report(cases, {}, {}, quick=True)["rows"]}
    assert rows["searched strategy predicted faster than data parallel: also faster when "
                "run"] == "1 of 2"


def test_a_case_has_each_of_its_traced_runs_and_no_other_case_s(tmp_path):
    """trace_files lists a case's traced runs in the order they were written (the first
    under the name a collection of one traced run per case used), never another case's."""
    from bench._sim_accuracy_runs import trace_files, trace_name
    for s, n in (("data", 3), ("random1", 1), ("random10", 2)):
        for i in range(n):
            (tmp_path / trace_name("rnnlm", s, i)).write_text("{}")
    got = trace_files(str(tmp_path), "rnnlm", "data")
    assert got == [str(tmp_path / n) for n in ("rnnlm_data.json", "rnnlm_data.t1.json",
                                               "rnnlm_data.t2.json")]
    assert trace_files(str(tmp_path), "rnnlm", "random1") == [str(tmp_path / "rnnlm_random1.json")]
    assert trace_files(str(tmp_path), "rnnlm", "random0") == []


def test_work_is_checked_against_the_traced_runs_cpu_of_the_busiest_rank(tmp_path):
    """traced_cpu: the median over a case's traces of its busiest rank's CPU seconds (the
    LOAD_EVENT records); the report's load-free row compares the predicted work with it."""
    import json
    from bench.sim_accuracy import report, traced_cpu
    from taskrt.trace import LOAD_EVENT
    paths = []
    for i, cpus in enumerate(((1.0, 3.0), (2.0, 1.0), (5.0, 4.0))):
        p = tmp_path / f"t{i}.json"
        p.write_text(json.dumps({"traceEvents": [
            {"ph": "M", "pid": r, "name": LOAD_EVENT, "args": {"cpu_s": c, "wait_s": 0.0}}
            for r, c in enumerate(cpus)]}))
        paths.append(str(p))
    assert traced_cpu(paths) == 3.0                 # busiest ranks 3, 2, 5
    (tmp_path / "old.json").write_text(json.dumps({"traceEvents": []}))
    assert traced_cpu([str(tmp_path / "old.json")]) is None
    cases = [dict(case("a", 1, "x", 1.0, 1.1), work_s=1.2, traced_cpu_s=1.0),
             dict(case("a", 2, "x", 1.0, 1.1), work_s=0.5, traced_cpu_s=1.0),
             dict(case("a", 2, "y", 1.0, 1.1), work_s=0.5, traced_cpu_s=None)]
    rows = {m: (v, n) for m, v, n in report(cases, {}, {}, quick=True)["rows"]}
    value, note = rows["predicted work vs the traced runs' CPU seconds: median / worst error"]
    assert value == "35.0% / 50.0%" and note.startswith("2 held-out cases")
    assert "1 process x 2 devices 20.0% / 20.0%; 2 ranks 50.0% / 50.0%" in note


def test_the_judged_search_keeps_the_faster_by_one_calibration_and_says_how_it_ran():
    from bench.sim_accuracy import judged_rows

    def searched(app, measured, predicted, judged_data):
        return dict(case(app, 2, "searched", measured, predicted), judged_data_s=judged_data)
    cases = [case("a", 2, "data", 1.0, 5.0), searched("a", 0.8, 0.9, 1.0),
             case("b", 2, "data", 1.0, 0.1), searched("b", 1.3, 1.2, 1.0),
             case("c", 2, "data", 1.0, 0.1), searched("c", 1.3, 0.9, 1.0),
             searched("d", 0.5, 0.1, 1.0)]                 # no data parallel case: left out
    (metric, value, note), = judged_rows(cases)
    assert value == "2 of 3" and "kept the searched in 2" in note
    assert note.endswith("a 2x1: 0.90x predicted, margin 0.0%, kept searched, measured 0.80x; "
                         "b 2x1: 1.20x predicted, margin 0.0%, kept data parallel, measured "
                         "1.00x; c 2x1: 0.90x predicted, margin 0.0%, kept searched, measured "
                         "1.30x")
    assert judged_rows([case("a", 2, "data", 1.0, 1.0), case("a", 2, "searched", 1, 1)]) == []
    # faster by less than the calibration's own error: data parallel kept
    close = [case("e", 2, "data", 1.0, 1.0),
             dict(searched("e", 1.36, 0.99, 1.0), judged_error=0.05),
             case("f", 2, "data", 1.0, 1.0),
             dict(searched("f", 0.9, 0.9, 1.0), judged_error=0.05)]
    (_, value, note), = judged_rows(close)
    assert value == "2 of 2" and "kept the searched in 1" in note
    assert "e 2x1: 0.99x predicted, margin 5.0%, kept data parallel, measured 1.00x" in note
    # slower by the medians, though its fastest run beat data parallel's median: slower,
    # counted apart as within the runs' spread
    spread = [case("g", 2, "data", 1.0, 1.0),
              dict(case("g", 2, "searched", 1.3, 0.8, spread=1.0), judged_data_s=1.0)]
    (_, value, note), = judged_rows(spread)
    assert value == "0 of 1" and "within the runs' spread" in note and ": 1 of 1)" in note


def test_the_judged_row_keeps_by_the_held_out_margin_and_gives_the_in_sample_count_beside():
    """AlexNet on 4 ranks (eleventh collection): searched 0.90x data parallel predicted, 1.32x
    measured; the in-sample error (6%) kept it, a held-out estimate of 15% does not."""
    from bench.sim_accuracy import judged_rows
    cases = [case("a", 2, "data", 1.0, 1.0),
             dict(case("a", 2, "searched", 1.32, 0.90), judged_data_s=1.0, judged_error=0.15,
                  judged_margin="held out", judged_in_sample=0.06),
             case("b", 2, "data", 1.0, 1.0),
             dict(case("b", 2, "searched", 0.5, 0.6), judged_data_s=1.0, judged_error=0.04,
                  judged_margin="in-sample", judged_in_sample=0.04)]
    (_, value, note), = judged_rows(cases)
    assert value == "2 of 2" and "kept the searched in 1;" in note
    assert "a 2x1: 0.90x predicted, margin 15.0%, kept data parallel, measured 1.00x" in note
    assert "in 1 its in-sample error, no estimate" in note
    assert "with the in-sample error as the margin (before 2026-12-07): 1 of 2 not slower, " \
           "kept the searched in 2" in note


def test_each_calibration_s_held_out_estimate_is_set_beside_its_error_on_the_other_fold():
    from bench.sim_accuracy import layout_text, report
    from bench._sim_accuracy_judged import heldout_rows
    cases = [dict(case("a", 2, "x", 1.0, 1.1), fold=0), dict(case("a", 2, "y", 1.0, 1.3),
                                                             fold=0),
             dict(case("a", 2, "z", 1.0, 0.95), fold=1)]
    estimates = {"2x1, fold 0": {"error": 0.12, "in_sample": 0.06, "folds": 3, "graphs": 4},
                 "2x1, fold 1": {"error": 0.08, "in_sample": 0.04, "folds": 3, "graphs": 3},
                 "1x2, fold 0": {"error": None, "in_sample": 0.1, "folds": 0, "graphs": 2}}
    (metric, value, note), = heldout_rows(estimates, cases, layout_text)
    assert value == "below in 1 of 2" and "2.00x (median)" in note
    assert "2 ranks fold 0: 12.0% (in-sample 6.0%; 3-fold over 4) vs 20.0% on the other " \
           "fold; 2 ranks fold 1: 8.0% (in-sample 4.0%; 3-fold over 3) vs 5.0%" in note
    rows = [m for m, _, _ in report(cases, {}, {}, True, None, estimates)["rows"]]
    assert metric in rows
    assert heldout_rows({}, cases, layout_text) == []


def test_a_case_s_speed_is_the_median_of_its_runs_references_on_every_rank():
    from bench.sim_accuracy import case_reference
    c = {"references": [[{"before_s": 1.0, "after_s": 2.0}, {"before_s": 3.0, "after_s": 9.0}],
                        [{"before_s": 4.0, "after_s": 5.0}, {"before_s": 6.0, "after_s": 7.0}]]}
    assert case_reference(c) == 4.5
    assert case_reference({"runs_s": [[1.0]]}) is None       # a collection without them


def test_report_gives_the_errors_with_the_speed_reference_beside_today_s():
    from bench.sim_accuracy import report
    cases = [dict(case("a", 1, "x", 1.0, 1.1, 0.01, 1.0), at_reference_s=1.02,
                  reference_s=0.003),
             dict(case("a", 1, "y", 2.0, 1.8, 0.01, 2.1), at_reference_s=1.9,
                  reference_s=0.004)]
    out = report(cases, {}, {}, quick=True)
    rows = {metric: (value, note) for metric, value, note in out["rows"]}
    assert rows["median relative error, held-out strategies"][0] == "10.0%"   # today's
    value, note = rows["with the speed reference: median / worst error"]
    assert value == "3.5% / 5.0%" and "References 3.00-4.00 ms" in note
    assert rows["with the speed reference: separated pairs ordered right"][0] == "1 of 1"
    assert out["results"]["at_reference"]["median_error"] == pytest.approx(0.035)
    assert rows["a 1 process x 2 devices: median / worst error"][1].endswith(
        "at speed 1900.0 -5%")
    assert "at the measured load and speed: median / worst error" not in rows
    cases = [dict(c, at_load_and_reference_s=p) for c, p in zip(cases, (1.0, 2.2))]
    cases.append(dict(case("a", 1, "z", 3.0, 3.0, 0.01), at_reference_s=3.0,
                      reference_s=0.003, at_load_and_reference_s=2.1))   # z/y ordered wrong
    rows = {m: (v, n) for m, v, n in report(cases, {}, {}, quick=True)["rows"]}
    value, note = rows["at the measured load and speed: median / worst error"]
    assert value == "10.0% / 30.0%"
    assert "ordered right 2 of 3. Per layout: 1 process x 2 devices 10.0% / 30.0%" in note
    bare = report([case("a", 1, "x", 1.0, 1.1, 0.01, 1.0)], {}, {}, quick=True)
    assert not any(m.startswith("with the speed reference") for m, _, _ in bare["rows"])
    assert bare["results"]["at_reference"] is None


def test_the_report_says_how_much_longer_the_traced_iterations_ran_than_the_timed():
    """traced_rows: each case's traced span over its measured period, the median and
    quartiles overall, per layout and per app's median; cases without a span left out."""
    from bench.sim_accuracy import report
    from bench._sim_accuracy_traced import traced_span
    cases = [dict(case("transformer", 2, "data", 4.0, 5.0), traced_span_s=5.2),
             dict(case("transformer", 2, "attribute", 4.0, 5.0), traced_span_s=4.8),
             dict(case("alexnet", 2, "data", 10.0, 9.0), traced_span_s=9.0),
             dict(case("alexnet", 1, "data", 10.0, 9.0), traced_span_s=11.0),
             dict(case("alexnet", 1, "parameter", 10.0, 9.0), traced_span_s=None)]
    rows = {m: (v, n) for m, v, n in report(cases, {}, {}, quick=True)["rows"]}
    value, note = rows["traced iteration over the timed period: median (quartiles)"]
    # ratios 1.3, 1.2, 0.9 (2 ranks), 1.1 (1 x 2): median 1.15, quartiles 0.95 / 1.275 (up)
    assert value == "1.15x (0.95-1.28)" and note.startswith("4 held-out cases")
    assert "1 process x 2 devices 1.10x (1.10-1.10): alexnet 1.10" in note
    assert "2 ranks 1.20x (0.90-1.30): alexnet 0.90, transformer 1.25" in note
    no_spans = [dict(c, traced_span_s=None) for c in cases]
    assert not any(m.startswith("traced iteration") for m, _, _ in
                   report(no_spans, {}, {}, quick=True)["rows"])
    assert traced_span([]) is None
