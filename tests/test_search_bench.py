"""bench/search_quality.py: its pure parts (cells, budget sharing, the paper's table, the
findings' checks on hand-made strategies, the why line) and a quick smoke run on --small apps
(real searches with proposal budgets; no timing thresholds)."""

import pytest

from bench import search_quality as sq
from parallel_ops import ParallelConfig
from strategy.costs.app_profile import load_app
from strategy.standard import data_parallel

pytestmark = pytest.mark.filterwarnings("ignore::strategy.costs.CostWarning")


def test_cells_cover_figure6_smallest_first():
    cells = sq.quality_cells()
    assert len(cells) == len(set(cells)) == 6 * 6 + 2
    assert [c.gpus for c in cells] == sorted(c.gpus for c in cells)
    assert {(c.cluster, c.app) for c in cells if c.gpus == 64} == {("k80", "alexnet"),
                                                                   ("k80", "resnet")}
    assert sq.Cell("k80", 64, "resnet").preset == "k80:16"
    assert sq.Cell("p100", 4, "nmt").preset == "p100:1"


def test_paper_table5_is_complete_and_delta_is_faster():
    for gpus in (4, 8, 16, 32, 64):
        assert set(sq.PAPER_TABLE5[gpus]) == set(sq.APPS)
        assert all(full > delta for full, delta in sq.PAPER_TABLE5[gpus].values())
    assert sq.PAPER_TABLE5[16]["inception"] == (388, 77)


def test_budget_from_argument_or_environment(monkeypatch):
    monkeypatch.delenv(sq.BUDGET_ENV, raising=False)
    assert sq.total_budget() == sq.DEFAULT_BUDGET_S
    monkeypatch.setenv(sq.BUDGET_ENV, "90")
    assert sq.total_budget() == 90.0
    assert sq.total_budget(30) == 30.0
    monkeypatch.setenv(sq.BUDGET_ENV, "ten minutes")
    with pytest.raises(ValueError, match=sq.BUDGET_ENV):
        sq.total_budget()
    with pytest.raises(ValueError, match="positive"):
        sq.total_budget(0)


def test_time_plan_shares_by_weight_and_scales_builds():
    now = [0.0]
    cells = [sq.Cell("p100", 4, "nmt"), sq.Cell("p100", 16, "nmt")]
    plan = sq.TimePlan(36.0, cells, clock=lambda: now[0])
    assert plan.estimated_build(cells[1]) is None
    assert plan.share(cells[0]) == pytest.approx(36.0 * 12 / (12 + 24))
    plan.record_build("nmt", 4, 2.0)
    now[0] = 20.0                                  # the first cell overran its 12 s
    assert plan.share(cells[1]) == pytest.approx(16.0)
    assert plan.estimated_build(cells[1]) == pytest.approx(8.0)
    now[0] = 50.0
    assert plan.share(sq.Cell("k80", 4, "nmt")) == 0.0


@pytest.fixture(scope="module")
def alexnet():
    net = load_app("alexnet", ["--small"], 4)
    return net.model


def test_alexnet_finding_tells_the_expert_from_data_parallel(alexnet):
    from apps.alexnet import mixed_strategy
    dp = data_parallel(alexnet, range(4))
    assert sq.alexnet_finding(alexnet, dp)[0] is False
    expert = {**dp, **mixed_strategy(alexnet, 4)}     # the ops it leaves out: DP
    ok, text = sq.alexnet_finding(alexnet, expert)
    assert ok and "convolutions data parallel 5/5" in text and "split 3/3" in text
    one_conv_split = dict(expert)
    one_conv_split["conv3"] = ParallelConfig.of(range(4), c=4)
    assert sq.alexnet_finding(alexnet, one_conv_split)[0] is False


def test_resnet_finding_counts_operators_kept_from_dp(alexnet):
    dp = data_parallel(alexnet, range(4))
    ok, text = sq.resnet_finding(alexnet, dp, dp)
    assert ok and "16/16" in text and "(split)" not in text
    last = dict(dp, fc8=ParallelConfig.of(range(4), o=4))
    ok, text = sq.resnet_finding(alexnet, dp, last)
    assert ok and "15/16" in text and "(split)" in text
    many = dict(last, **{n: ParallelConfig.of([0]) for n in ("conv1", "conv2", "pool1")})
    assert sq.resnet_finding(alexnet, dp, many)[0] is False       # 12/16 < 90%


def test_nmt_finding():
    from apps.nmt import mixed_strategy
    net = load_app("nmt", ["--small"], 4)
    model = net.model
    assert sq.nmt_finding(model, mixed_strategy(model, 4), 4)[0] is True
    dp = data_parallel(model, range(4))
    ok, text = sq.nmt_finding(model, dp, 4)
    assert not ok and "0/2" in text
    soft_dp = dict(mixed_strategy(model, 4), softmax_fc=dp["softmax_fc"])
    assert sq.nmt_finding(model, soft_dp, 4)[0] is False


def test_out_dir_reads_the_bench_flag():
    assert sq.out_dir(["search_quality", "--out", "/tmp/x"]) == "/tmp/x"
    assert sq.out_dir(["--out=/tmp/y", "search_quality"]) == "/tmp/y"
    assert sq.out_dir(["search_quality"]) == sq.HERE


def test_quick_run_searches_and_reports(tmp_path):
    res = sq.run(quick=True, out=str(tmp_path))
    quality = res["results"]["quality"]
    assert [c["app"] for c in quality] == ["alexnet", "nmt"]
    for c in quality:
        assert c["status"] == "ok" and c["proposals"] == 12
        assert [s["seed"] for s in c["seeds"]] == [0, 1]      # seed 0's is the cell's
        assert c["seeds"][0]["predicted_s"] == c["searched_s"]
        assert all(s["proposals"] == 12 and 0 < s["simulated"] <= 12 for s in c["seeds"])
        # never worse than data parallel; throughputs agree with the predicted times
        assert c["searched_sps"] >= c["dp_sps"] and c["vs_dp"] >= 1.0
        assert c["searched_sps"] == pytest.approx(c["batch"] / c["search"]["predicted_s"])
        assert c["time_to_best_s"] <= c["search_s"]
        assert c["why"]
        assert "finding" in c
    delta = res["results"]["delta_vs_full"]
    assert len(delta) == 1 and delta[0]["identical"] and delta[0]["proposals"] == 8
    metrics = [r[0] for r in res["rows"]]
    assert any(m.startswith("finding: AlexNet") for m in metrics)
    assert any(m.startswith("search time: nmt on 4 GPUs") for m in metrics)
    timing = next(r for r in res["rows"] if r[0].startswith("search time: nmt on 4 GPUs"))
    assert "(seeds 0, 1)" in timing[1] and "paper (Table 5) full / delta: 40 / 16 s" in timing[2]
    assert all(len(r) == 3 for r in res["rows"])
    png = tmp_path / "figure6.png"             # matplotlib is part of the install
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_agreement_of_seeds():
    assert sq.agreement([{"predicted_s": 1.0}, {"predicted_s": 1.004}]) == \
        "seeds agree (0.40% apart)"
    assert sq.agreement([{"predicted_s": 1.0}, {"predicted_s": 1.2}]) == "seeds differ by 20.0%"
    assert sq.agreement([{"predicted_s": 1.0}, {"predicted_s": float("inf")}]).startswith(
        "some seed")


def test_why_line_names_what_the_searched_strategy_saved():
    from strategy.explain import Breakdown, Comparison, OpChange
    dp = Breakdown(1.0, compute_s=2.0, transfer_s=0.5, sync_s=0.4)
    new = Breakdown(0.8, compute_s=2.0, transfer_s=0.6, sync_s=0.1)
    changes = [OpChange("fc6", "[n=4]@0-3", "[o=4]@0-3", 0.0, -0.3),
               OpChange("relu6", "[n=4]@0-3", "[a1=4]@0-3", 0.01, 0.0)]
    line = sq.why_line(Comparison("data parallel", "searched", dp, new, changes))
    assert line.startswith("mostly sync saved") and "sync -300 ms" in line
    assert "transfers +100 ms" in line and "2 op(s) changed, e.g. fc6" in line
    assert sq.why_line(Comparison("data parallel", "searched", dp, dp, [])).startswith("same")
