"""A run's period (apps/report.py Result.period_s): the timed iterations' wall time between
a mark before and one after them, less the app's own work between steps, over their number;
under MPI each mark after a barrier of every rank. A real 2-rank AlexNet --small run whose
strategy leaves rank 1 working after rank 0's last node (every operator on device 1 but the
loss on device 0: rank 0 computes the loss and its gradient, rank 1 the whole backward), with
--trace: the period is the marks' span less the app's work over the untraced timed
iterations; the traced last iteration (every rank's events, on the host's monotonic clock by
their recorded origins) lies after the second mark, kept out of the times and the period,
and the trace keeps the period, which calibration fits to. An --trace run carries every
rank's speed reference (strategy/speedref.py), which calibration sees."""
import dataclasses
import json
import os
import statistics
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from mpi_launch import run_mpi  # noqa: E402
from parallel_ops.config import ParallelConfig  # noqa: E402
from strategy import files  # noqa: E402
from strategy.costs.app_profile import load_app  # noqa: E402
from strategy.speedref import REFERENCE_EVENT, trace_reference  # noqa: E402
from taskrt import Machine  # noqa: E402
from taskrt.trace import LOAD_EVENT, UNTRACED_PERIOD  # noqa: E402

SMALL = ["--small", "--batch-size", "8"]


def loss_on_rank0(path: str) -> str:
    """AlexNet on 2 devices: every operator on device 1, the loss on device 0."""
    net = load_app("alexnet", SMALL, 2)
    configs = {op.name: ParallelConfig((), (0 if op.name == "loss" else 1,))
               for op in net.model.ops}
    files.save(path, configs, net.model, Machine.local(2))
    return path


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("period")
    strategy = loss_on_rank0(str(out / "s.json"))
    trace = str(out / "trace.json")
    rc, text, _ = run_mpi(2, [os.path.join(HERE, "mpi_period.py"), str(out), "alexnet",
                              *SMALL, "--iterations", "3", "--warmup", "1", "--quiet",
                              "--strategy", strategy, "--trace", trace], timeout=300)
    assert rc == 0, text
    ranks = [json.load(open(out / f"rank{r}.json")) for r in range(2)]
    return ranks, json.load(open(trace))


def _span_of_rank(trace: dict, rank: int) -> tuple[float, float]:
    """(first start, last end) of the rank's traced events on the host's monotonic clock."""
    origin = next(e["args"]["clock_origin_s"] for e in trace["traceEvents"]
                  if e.get("ph") == "M" and e.get("name") == LOAD_EVENT and e["pid"] == rank)
    evs = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["pid"] == rank]
    return (origin + min(e["ts"] for e in evs) / 1e6,
            origin + max(e["ts"] + e["dur"] for e in evs) / 1e6)


def test_a_two_rank_period_is_barrier_to_barrier_over_every_rank_s_iterations(two_ranks):
    ranks, trace = two_ranks
    spans = [_span_of_rank(trace, r) for r in range(2)]
    assert spans[1][1] > spans[0][1]          # rank 1 works on after rank 0's last node
    for mine, (first, _) in zip(ranks, spans):
        assert len(mine["times"]) == 2 and mine["traced_s"] > 0   # 3 timed, the last traced
        assert mine["period_s"] == pytest.approx(
            (mine["timed_to"] - mine["timed_from"] - mine["besides_s"]) / 2, rel=1e-12)
        assert 0 <= mine["besides_s"] < mine["timed_to"] - mine["timed_from"]
        # the rank's traced iteration after its second mark (another rank, woken up to
        # 0.2 ms late from the barrier, may mark after this one has begun)
        assert mine["timed_to"] < first
    record = trace["otherData"]["soapflow"][UNTRACED_PERIOD]
    assert record == {"period_s": ranks[0]["period_s"], "iterations": 2}


def test_an_app_s_trace_carries_every_rank_s_speed_reference(two_ranks):
    ranks, trace = two_ranks
    refs = [e for e in trace["traceEvents"] if e.get("name") == REFERENCE_EVENT]
    assert sorted(e["pid"] for e in refs) == [0, 1]
    for e in refs:
        assert e["args"] == dict(ranks[e["pid"]]["speed_reference"], workload="torch-mix-1")
    values = [v for r in ranks for v in r["speed_reference"].values()]
    assert trace_reference(trace["traceEvents"]) == statistics.median(values)


def test_one_process_s_period_and_its_trace_s_reference_reach_calibration(tmp_path,
                                                                         monkeypatch):
    """One process (2 logical devices): the same period, no barrier; the feeds made inside
    the window are taken out of it and the traced iteration's are made after it; the
    trace's speed reference is what calibration puts the run at."""
    import time
    import apps.rnnlm
    from apps.common import run
    from apps.rnnlm import APP as RNNLM
    from strategy.calibration import calibrate, load_runs
    from strategy.machines import DEVICE_SPECS, cluster_model
    feeds, made = [], apps.rnnlm.LanguageNetwork.synthetic

    def timed_feeds(self, seed, iteration):
        start = time.perf_counter()
        out = made(self, seed, iteration)
        feeds.append((start, time.perf_counter()))
        return out
    monkeypatch.setattr(apps.rnnlm.LanguageNetwork, "synthetic", timed_feeds)
    path = str(tmp_path / "t.json")
    res = run(RNNLM, ["--small", "--iterations", "3", "--warmup", "1", "--quiet",
                      "--devices-per-rank", "2", "--trace", path], out=None)
    assert len(feeds) == 4
    assert res.timed_to <= feeds[3][0]                   # the traced iteration's, after it
    inside = sum(end - start for start, end in feeds[2:3])   # the 2nd timed iteration's
    assert res.besides_s >= inside
    span = res.timed_to - res.timed_from                 # the 2 untraced timed iterations
    assert len(res.times) == 2 and res.traced_s > 0
    assert res.period_s == pytest.approx((span - res.besides_s) / 2, rel=1e-12)
    assert sum(res.times) <= 2 * res.period_s < span      # the steps are inside it
    ref = statistics.median(res.speed_reference.values())
    assert load_runs([path])[0].reference_s == ref
    assert load_runs([path])[0].untraced_s == res.period_s
    base = cluster_model("one", dataclasses.replace(DEVICE_SPECS["P100"], kind="cpu"), 1)
    assert calibrate([path], base)[2].reference_s == pytest.approx(ref)
