"""Replay of a recorded run (strategy/replay.py): a real one-process RNNLM --small run with
2 logical devices and --trace is replayed on `local` (calibrated once, one device shared by
the two logical ones); node ids and names match the run's graph, totals add up, the merged
Chrome trace holds both timelines, and traces of another graph are refused clearly."""
import json

import pytest

from apps.common import run
from apps.rnnlm import APP as RNNLM
from strategy.replay import ReplayError, replay
from taskrt.trace import node_label

ARGV = ["--small", "--devices-per-rank", "2", "--iterations", "1", "--warmup", "1",
        "--quiet"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """(the real run's Result, its trace path, the replay of it on `local`)."""
    path = str(tmp_path_factory.mktemp("replay") / "run.json")
    res = run(RNNLM, ARGV + ["--trace", path], out=None)
    return res, path, replay(None, None, path)


def test_the_trace_records_what_ran(recorded):
    res, path, _ = recorded
    meta = json.load(open(path))["otherData"]["soapflow"]
    assert meta["app"] == "rnnlm" and meta["argv"] == ARGV + ["--trace", path]
    assert meta["ranks"] == 1 and meta["devices_per_rank"] == 2
    assert meta["fingerprint"] == res.trainer.graph.fingerprint()
    assert meta["batch_size"] == 16 and set(meta["strategy"]["operators"]) == \
        {op.name for op in res.network.model.ops}


def test_nodes_match_the_run(recorded):
    res, _, rep = recorded
    graph = res.trainer.graph
    assert [n.id for n in rep.nodes] == list(range(len(graph.nodes)))
    assert [n.name for n in rep.nodes] == [node_label(n) for n in graph.nodes]
    measured = {e.node: e.duration for e in res.trainer.executor.trace}
    assert all(n.measured_s == pytest.approx(measured[n.id], abs=1e-9) for n in rep.nodes)
    assert rep.fingerprint == graph.fingerprint() and rep.layout == "1 rank x 2 devices"
    assert rep.valid and "2 logical devices per device" in rep.machine


def test_totals_add_up(recorded):
    res, _, rep = recorded
    events = res.trainer.executor.trace
    assert rep.measured_total_s == pytest.approx(max(e.end for e in events) -
                                                 min(e.start for e in events), abs=1e-9)
    # one process: the prediction serializes both logical devices on one compute resource
    assert rep.predicted_total_s == pytest.approx(
        max(n.predicted_start_s + n.predicted_s for n in rep.nodes))
    for by in ("kind", "operator"):
        rows = rep.groups(by)
        assert sum(r[1] for r in rows) == len(rep.nodes)
        assert sum(r[2] for r in rows) == pytest.approx(sum(n.measured_s for n in rep.nodes))
        assert sum(r[3] for r in rows) == pytest.approx(sum(n.predicted_s for n in rep.nodes))
        diffs = [abs(p - m) for _, _, m, p in rows]
        assert diffs == sorted(diffs, reverse=True)
    kinds = {k: c for k, c, _, _ in rep.groups("kind")}
    assert kinds == res.trainer.graph.count()
    text = rep.text()
    for fragment in ("Replay of rnnlm --small --devices-per-rank 2", "iteration     measured",
                     "per kind", "per operator", "rnn_l0", "per node"):
        assert fragment in text, fragment
    d = json.loads(json.dumps(rep.to_dict()))
    assert len(d["nodes"]) == len(rep.nodes) and d["predicted_total_s"] == rep.predicted_total_s


def test_merged_chrome_trace_has_both_timelines(recorded, tmp_path):
    res, _, rep = recorded
    out = str(tmp_path / "both.json")
    rep.write_chrome(out)
    events = json.load(open(out))["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert names[0] == "measured rank 0" and names[1].startswith("predicted on 1x1 cpu")
    spans = [e for e in events if e["ph"] == "X"]
    measured = [e for e in spans if e["pid"] == 0]
    predicted = [e for e in spans if e["pid"] == 1]
    assert len(measured) == len(predicted) == len(res.trainer.graph.nodes)
    assert {e["args"]["node"] for e in predicted} == {e["args"]["node"] for e in measured}


def test_a_trace_of_another_graph_is_refused(recorded, tmp_path):
    _, path, _ = recorded
    other = ["--small", "--devices-per-rank", "2", "--hidden", "24"]
    with pytest.raises(ReplayError, match="recorded from another graph .fingerprint"):
        replay("rnnlm", other, path, "local")
    # without the record, the events' node names are checked against the rebuilt graph
    data = json.load(open(path))
    del data["otherData"]
    bare = str(tmp_path / "bare.json")
    json.dump(data, open(bare, "w"))
    with pytest.raises(ReplayError, match="does not match the rebuilt graph"):
        replay("rnnlm", ["--small", "--devices-per-rank", "2", "--seq-len", "4"], bare,
               "local")
    with pytest.raises(ReplayError, match="not JSON"):
        (tmp_path / "junk.json").write_text("{")
        replay(None, None, str(tmp_path / "junk.json"))


def test_profile_from_the_trace_holds_in_situ_task_costs(recorded, tmp_path):
    """Per cost key, the median of the run's task durations; replayed with it, every task
    whose key is unique in the graph is predicted exactly as measured."""
    import statistics

    from strategy.costs.__main__ import main as costs_main
    from strategy.costs.profile import Profile
    from strategy.replay import profile_from_trace
    res, path, _ = recorded
    graph = res.trainer.graph
    measured = {e.node: e.duration for e in res.trainer.executor.trace}
    by_key: dict = {}
    for n in graph.nodes:
        if n.kind == "task":
            by_key.setdefault(n.cost_key, []).append(measured[n.id])
    prof = profile_from_trace(path)
    assert set(prof.keys("cpu")) == set(by_key)
    for key, ts in by_key.items():
        m = prof.get(key, "cpu")
        assert m.seconds == pytest.approx(statistics.median(ts), abs=1e-9) and m.repeats == len(ts)
    assert prof.meta["runs"][0]["source"] == "trace"
    out = tmp_path / "insitu.profile"
    assert costs_main(["from-trace", path, "-o", str(out)], out=open(tmp_path / "log", "w")) == 0
    assert set(Profile.load(str(out)).keys("cpu")) == set(by_key)
    # the app and flags given, as for a trace that does not record them
    named = tmp_path / "named.profile"
    assert costs_main(["from-trace", path, "-o", str(named), "--app", "rnnlm", *ARGV],
                      out=open(tmp_path / "log2", "w")) == 0
    assert set(Profile.load(str(named)).keys("cpu")) == set(by_key)
    rep = replay(None, None, path, profile=str(out))
    unique = {k for k, ts in by_key.items() if len(ts) == 1}
    tasks = [n for n in rep.nodes if n.kind == "task" and graph.nodes[n.id].cost_key in unique]
    assert tasks and all(n.predicted_s == pytest.approx(n.measured_s, abs=1e-9) for n in tasks)


def test_profile_from_a_bad_trace_is_refused(tmp_path):
    from strategy.replay import profile_from_trace
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ReplayError, match="not JSON"):
        profile_from_trace(str(bad))


def test_profile_from_a_gpu_trace_is_refused(recorded, tmp_path):
    from strategy.replay import profile_from_trace
    _, path, _ = recorded
    data = json.load(open(path))
    data["otherData"]["soapflow"]["device_kind"] = "cuda"
    gpu = tmp_path / "gpu.json"
    gpu.write_text(json.dumps(data))
    with pytest.raises(ReplayError, match="recorded on cuda devices, whose events time the "
                                          "host's issue"):
        profile_from_trace(str(gpu))
