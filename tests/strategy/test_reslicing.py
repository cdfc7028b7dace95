"""Views the one-process executor re-slices each iteration (strategy/reslicing.py): counted
from the graph as the LocalExecutor counts them, priced by calibrate() from a key's events
at different counts, taken out of the keys' in-situ times and put back per node by
predict(). Real runs: the Transformer --small on 1 process x 2 devices, data parallel (no
views) and parameter parallel (248 an iteration), recorded with --trace."""
import statistics

import pytest
import torch

import taskrt.executor.instances as instances
from apps.common import run
from apps.transformer import APP as TRANSFORMER
from strategy import files, standard
from strategy.calibration import calibrate, fit_from_files, load_runs, predict
from strategy.costs import Profile
from strategy.costs.app_profile import load_app
from strategy.insitu import insitu_profile
from strategy.machines import DEVICE_SPECS, cluster_model, load
from strategy.reslicing import resliced_views, view_cost
from taskrt.machine import Machine
from taskrt.taskgraph import TASK

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")   # keys no profile has

ARGV = ["--small", "--batch-size", "16", "--iterations", "1", "--warmup", "1", "--quiet",
        "--devices-per-rank", "2"]


@pytest.fixture(scope="module")
def strategy_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("views")
    net = load_app("transformer", ["--small", "--batch-size", "16"], 2)
    paths = {}
    for name in ("data", "parameter"):
        paths[name] = str(folder / f"{name}.json")
        files.save(paths[name], standard.STANDARD[name](net.model, [0, 1]), net.model,
                   Machine.local(2))
    return paths


@pytest.fixture(scope="module")
def traces(strategy_files, tmp_path_factory):
    folder = tmp_path_factory.mktemp("views_traces")
    out = []
    for name, path in strategy_files.items():
        out.append(str(folder / f"{name}.trace.json"))
        run(TRANSFORMER, ARGV + ["--strategy", path, "--trace", out[-1]], out=None)
    return out


def base():
    import dataclasses
    return cluster_model("one", dataclasses.replace(DEVICE_SPECS["P100"], kind="cpu"), 1)


def executor_counts(strategy_path) -> dict:
    """{node id: views the real LocalExecutor slices anew} over one iteration after two,
    counted in Buffer.attach / Buffer.adopt."""
    net = load_app("transformer", ["--small", "--batch-size", "16"], 2)
    machine = Machine.local(2)
    configs = files.load(strategy_path, net.model, machine)
    trainer = net.model.compile(machine, configs, net.optimizer, record_trace=True,
                                executor="local")
    for it in range(2):
        trainer.step(net.synthetic(0, it))
    counts, current = {}, [None]
    attach, adopt = instances.Buffer.attach, instances.Buffer.adopt

    def sliced(buf):
        return sum(1 for v in buf.views.values() if v.slices is not None)

    def counting_attach(self, flat, shaped=None):
        if self.sliced_for is not flat:
            counts[current[0]] = counts.get(current[0], 0) + sliced(self)
        return attach(self, flat, shaped)

    def counting_adopt(self, value):
        ok = adopt(self, value)
        if ok:
            counts[current[0]] = counts.get(current[0], 0) + sliced(self)
        return ok
    ex, store = trainer.executor, trainer.executor.store
    trainer._feed(net.synthetic(0, 2))
    store.start_iteration()
    instances.Buffer.attach, instances.Buffer.adopt = counting_attach, counting_adopt
    try:
        with torch.no_grad():
            for node, (step, allocate, free) in zip(trainer.graph.nodes, ex.plan):
                current[0] = node.id
                store.begin(allocate)
                step()
                store.release(free)
    finally:
        instances.Buffer.attach, instances.Buffer.adopt = attach, adopt
    return {i: n for i, n in counts.items() if n}, trainer.graph


def test_views_counted_from_the_graph_are_the_executors(strategy_files, monkeypatch):
    # the executor's default: small buffers released by make_light (the tests' conftest
    # makes every buffer a temporary)
    from taskrt.settings import Settings
    monkeypatch.setenv("TASKRT_MIN_TEMPORARY_BYTES", str(Settings().min_temporary_bytes))
    for name, path in strategy_files.items():
        counted, graph = executor_counts(path)
        assert resliced_views(graph) == counted, name
    assert counted and sum(counted.values()) > 100   # parameter parallel has many


def test_view_cost_is_the_slope_between_a_keys_counts():
    us = 1e-6
    samples = {"a": {0: [10 * us, 11 * us, 10 * us], 8: [50 * us, 52 * us, 50 * us]},
               "b": {2: [20 * us] * 3, 6: [40 * us] * 4},
               "c": {3: [5 * us, 6 * us, 5 * us]}}           # one count: says nothing
    assert view_cost(samples) == pytest.approx(5 * us)
    assert view_cost({"c": {3: [5 * us] * 3}}) == 0.0
    assert view_cost({"a": {0: [50 * us] * 3, 8: [10 * us] * 3}}) == 0.0   # never below 0


def test_view_cost_takes_counts_one_preempted_event_cannot_set():
    """A count seen in fewer than MIN_EVENTS events makes no slope: an RNNLM recording whose
    LSTM step took 243 us in 7 events and 4.2 ms (preempted) in the 1 at another count fitted
    2 ms a view, and the calibration took that out of every event. A count of 3 events with
    one preempted keeps its median, and a node many times its key's others for its views
    is no outlier."""
    us = 1e-6
    samples = {"lstm": {22: [243 * us] * 7, 23: [4223 * us]},
               "softmax": {0: [157 * us] * 3, 2: [97 * us]}}
    assert view_cost(samples) == 0.0
    samples = {"lstm": {22: [243 * us] * 7, 23: [4223 * us, 248 * us, 248 * us]},
               "add": {0: [10 * us] * 5, 40: [210 * us] * 3}}
    assert view_cost(samples) == pytest.approx(5 * us)


def test_calibration_prices_views_apart_from_keys(traces):
    runs = load_runs(traces)
    views = {r.path: resliced_views(r.graph) for r in runs}
    samples: dict = {}                  # cost key -> views of the node -> event seconds
    for r in runs:
        nodes = r.graph.nodes
        for e in r.events:
            if e.get("ph") == "X" and "node" in (e.get("args") or {}):
                i = int(e["args"]["node"])
                if nodes[i].kind is TASK:
                    samples.setdefault(nodes[i].cost_key, {}).setdefault(
                        views[r.path].get(i, 0), []).append(e["dur"] / 1e6)
    assert any(len(by) > 1 for by in samples.values())   # keys at two counts: a slope
    # the events as recorded, not put at one speed of the machine (speedref.py)
    model, profile, fit = calibrate(traces, base(), speed_reference=False)
    assert fit.view_s == view_cost(samples)
    # a key's price is the median of its events less its nodes' views at the view cost
    s = 5e-6
    for r in runs:
        r.executor_s = {i: s * n for i, n in views[r.path].items()}
    priced = insitu_profile(runs)[0]
    checked = 0
    for key, by in samples.items():
        less = [max(0.1 * t, t - s * n) for n, ts in by.items() for t in ts]
        assert priced.get(key, "cpu").seconds == pytest.approx(statistics.median(less),
                                                              rel=1e-12)
        checked += any(by)
    assert checked


def test_predict_puts_each_nodes_views_back(traces, tmp_path):
    import dataclasses
    from strategy.calibration import PREDICTION_RECORD
    model, profile, fit = calibrate(traces, base())
    s = 5e-6                            # a view's cost as the benchmark's runs fitted it
    fit = dataclasses.replace(fit, view_s=s)
    none = dataclasses.replace(fit, view_s=0.0)
    for r in load_runs(traces):
        n = sum(resliced_views(r.graph).values())
        # one process: one thread runs every node, so the views add up
        for traced in (True, False):
            got = predict(fit, r.graph, r.int_ranges, 1, 2, traced=traced)
            assert got - predict(none, r.graph, r.int_ranges, 1, 2, traced=traced) == \
                pytest.approx(s * n * fit.contention, rel=1e-6, abs=1e-12)
    assert n > 100                      # parameter parallel's views: the test checks much
    # the machine file's record carries it: the files predict as the calibration
    record = dict(model.calibration)
    record["from_traces"] = dict(record["from_traces"])
    record["from_traces"][PREDICTION_RECORD] = dict(
        record["from_traces"][PREDICTION_RECORD], view_s=s)
    model.with_host_costs(model.host_costs, record).save(str(tmp_path / "m.json"))
    profile.save(str(tmp_path / "p.profile"))
    again = fit_from_files(load(str(tmp_path / "m.json")),
                           Profile.load(str(tmp_path / "p.profile")))
    assert again.view_s == s
    r = load_runs(traces)[1]
    assert predict(again, r.graph, r.int_ranges, 1, 2) == pytest.approx(
        predict(fit, r.graph, r.int_ranges, 1, 2), rel=1e-9)
