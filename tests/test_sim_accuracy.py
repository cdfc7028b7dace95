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


def test_report_has_the_in_situ_row_for_two_ranks():
    from bench.sim_accuracy import report

    def case(app, ranks, measured, predicted, in_situ=None):
        c = {"app": app, "ranks": ranks, "strategy": "s", "measured_s": measured,
             "predicted_s": predicted, "error": (predicted - measured) / measured}
        if in_situ is not None:
            c["predicted_in_situ_s"] = in_situ
            c["error_in_situ"] = (in_situ - measured) / measured
        return c
    cases = [case("a", 1, 1.0, 0.9), case("a", 1, 2.0, 1.8),
             case("a", 2, 1.0, 0.5, 0.8), case("a", 2, 2.0, 1.0, 1.9),
             case("b", 2, 4.0, 2.0, 3.0)]
    out = report(cases, {}, {}, quick=True)
    rows = {metric: (value, note) for metric, value, note in out["rows"]}
    value, note = rows["2 ranks, task costs in situ (from traced 1-process runs): median / "
                       "worst error, Spearman"]
    assert value == "20% / 25%, 1.00"                 # errors 0.2, 0.05, 0.25
    assert note.startswith("3 cases; median per app: a 12%, b 25%")
    assert out["results"]["groups"]["2 ranks, in situ"]["cases"] == 3
    assert "2 ranks, task costs in situ" not in str(report(cases[:2], {}, {}, True)["rows"])
