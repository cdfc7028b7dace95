"""What a calibration takes out of traced runs so that it predicts untraced ones
(strategy/calibration.py, strategy/insitu.py; docs/simulator.md, 2026-12-03): the tracer's
own time per node, which lies in the gaps the host costs are fitted from, and the keys no
run timed bounded by their operator's in-situ work per FLOP at other shapes."""
import math
import warnings

import numpy as np
import pytest

from strategy import calibration
from strategy.calibration import RecordedRun, host_samples, tracer_costs
from strategy.costs import Measurement, Profile
from strategy.costs.profile import Work
from strategy.insitu import price_unseen_by_operator
from strategy.logical_devices import shared
from strategy.machines import DEVICE_SPECS, cluster_model

warnings.simplefilter("ignore")


@pytest.fixture(scope="module")
def graph():
    """RNNLM --small, data parallel on one CPU process of 2 logical devices."""
    import dataclasses
    from parallel_ops.lowering import lower
    from strategy import standard
    from strategy.costs.app_profile import load_app
    from taskrt import plan
    model = shared(cluster_model("one", dataclasses.replace(DEVICE_SPECS["P100"], kind="cpu"),
                                 1), 2)
    net = load_app("rnnlm", ["--small", "--batch-size", "8"], model.num_devices)
    machine = model.taskrt_machine()
    s = standard.data_parallel(net.model, list(range(model.num_devices)))
    lowered = lower(net.model, s, machine, net.optimizer)
    return plan(lowered.launches, machine, initial=lowered.initial)


def _run(graph, starts_us, durs_us):
    events = [{"ph": "X", "pid": 0, "ts": s, "dur": d, "args": {"node": i}}
              for i, (s, d) in enumerate(zip(starts_us, durs_us))]
    return RecordedRun("t.json", "rnnlm", [], 1, 2, graph, events, {}, 1e-3)


def test_gaps_leave_out_what_recording_the_previous_event_cost(graph, monkeypatch):
    """The gap before an event holds the traced loop's recording of the event before it
    (label, track, TraceEvent), which an untraced run does not pay: 50 us and 40 us gaps
    after nodes whose recording costs 20 us and 15 us are 30 us and 25 us of the
    executor's own work (the old code kept 50 and 40)."""
    own = np.zeros(len(graph.nodes))
    own[0], own[1] = 20e-6, 15e-6
    monkeypatch.setattr(calibration, "_tracer_of", lambda g: own)
    run = _run(graph, [0.0, 150.0, 290.0], [100.0, 100.0, 100.0])
    gaps = {}
    for kind, rows in host_samples(run, lambda n: 0.0).items():
        gaps.setdefault(kind, []).extend(g for g, _, _ in rows if g is not None)
    assert sorted(x for k in gaps for x in gaps[k]) == pytest.approx([25e-6, 30e-6])
    plain = host_samples(run, lambda n: 0.0, tracer=False)
    assert sorted(g for rows in plain.values() for g, _, _ in rows if g is not None) == \
        pytest.approx([40e-6, 50e-6])


def test_tracer_costs_time_every_node(graph):
    cost = tracer_costs(graph, repeats=2)
    assert cost.shape == (len(graph.nodes),)
    assert all(math.isfinite(c) and c > 0 for c in cost)


def test_unseen_keys_are_bounded_by_their_operators_work_per_flop():
    """A key no run timed whose price from the profiler (here 500 us) is above what the
    same operator's timed shapes do per FLOP (100 us for 1 MFLOP: 200 us for 2 MFLOP) gets
    that bound; one already below keeps its price, as do other operators' keys and keys
    without work."""
    op, other = ("conv2d", (("k", "3"),), "bwd"), ("linear", (), "bwd")
    keys = {"seen": (op, ("a",)), "high": (op, ("b",)), "low": (op, ("c",)),
            "other": (other, ("d",)), "nowork": (op, ("e",))}
    base, prof = Profile(), Profile()
    for name, price, flops in (("seen", 1e-4, 1e6), ("high", 5e-4, 2e6), ("low", 1.5e-4, 2e6),
                               ("other", 5e-4, 2e6), ("nowork", 5e-4, None)):
        k = keys[name]
        base.add(k, "cpu", Measurement(price, 5, price, price),
                 Work(flops, 0) if flops else None)
        prof.add(k, "cpu", Measurement(price, 5, price, price))
    assert price_unseen_by_operator(prof, base, {keys["seen"]}) == 1
    assert prof.get(keys["high"], "cpu").seconds == pytest.approx(2e-4)
    for name, price in (("seen", 1e-4), ("low", 1.5e-4), ("other", 5e-4), ("nowork", 5e-4)):
        assert prof.get(keys[name], "cpu").seconds == pytest.approx(price)


def test_three_timed_shapes_give_the_operators_line():
    """With three or more timed shapes the bound is the line work = a + b x FLOPs through
    them (here 10 us + 1 us per MFLOP), so a small shape keeps its fixed cost."""
    op = ("conv2d", (), "fwd")
    base, prof = Profile(), Profile()
    seen = set()
    for i, mf in enumerate((1, 2, 4)):
        k = (op, (f"s{i}",))
        w = 1e-5 + 1e-6 * mf
        base.add(k, "cpu", Measurement(w, 5, w, w), Work(mf * 1e6, 0))
        prof.add(k, "cpu", Measurement(w, 5, w, w))
        seen.add(k)
    u = (op, ("u",))
    base.add(u, "cpu", Measurement(1e-3, 5, 1e-3, 1e-3), Work(8e6, 0))
    prof.add(u, "cpu", Measurement(1e-3, 5, 1e-3, 1e-3))
    price_unseen_by_operator(prof, base, seen)
    assert prof.get(u, "cpu").seconds == pytest.approx(1e-5 + 8e-6)
