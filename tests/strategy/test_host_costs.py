"""Host costs in the machine model and the simulator (the issuing thread as a resource), the
machine file's "host_costs", and the pure parts of calibration's fit (strategy/calibration.py).
Delta == full with host costs: tests/strategy/test_delta.py."""
import dataclasses
import json
import warnings

import numpy as np
import pytest

from parallel_ops.lowering import lower
from strategy import standard
from strategy.hostcosts import _typical_gap, fit_host_costs
from strategy.insitu import _line
from strategy.costs import CostModel
from strategy.costs.app_profile import load_app
from strategy.logical_devices import shared
from strategy.machines import (DEVICE_SPECS, HostCost, MachineFileError, cluster_model,
                               from_bytes, from_dict, machine_model, to_dict)
from strategy.simulator import NodeTimer, simulate, trace_of
from taskrt import plan

warnings.simplefilter("ignore")       # analytic-cost fallback warnings

COSTS = {"task": HostCost(3e-5), "copy": HostCost(4e-6, 1e-10), "send": HostCost(1e-5, 2e-10),
         "recv": HostCost(6e-6, 1e-10), "reduce": HostCost(5e-6),
         "allreduce_start": HostCost(2e-5, 1e-11), "allreduce_wait": HostCost(4e-6)}
CPU = dataclasses.replace(DEVICE_SPECS["P100"], kind="cpu")


def graph_of(model, strategy_fn=standard.data_parallel):
    net = load_app("rnnlm", ["--small", "--batch-size", "8"], model.num_devices)
    machine = model.taskrt_machine()
    s = strategy_fn(net.model, list(range(model.num_devices)))
    lowered = lower(net.model, s, machine, net.optimizer)
    return plan(lowered.launches, machine, initial=lowered.initial)


def host_total(graph, timer):
    return sum(p[0] + p[2] for p in map(timer.host_phases, graph.nodes))


def test_one_process_runs_host_work_and_tasks_on_one_thread():
    """1 CPU process x 2 logical devices: every node and every host phase on one thread, so
    the iteration is their plain sum."""
    base = shared(cluster_model("one", CPU, 1), 2)
    m = shared(cluster_model("one", CPU, 1).with_host_costs(COSTS), 2)
    g = graph_of(m)
    costs = CostModel()
    timer = NodeTimer(m, costs)
    devices = sum(timer.timing(n)[0] for n in g.nodes)
    host = host_total(g, timer)
    assert host > 0
    assert simulate(g, m, costs).makespan == pytest.approx(devices + host, rel=1e-12)
    assert simulate(g, base, costs).makespan == pytest.approx(devices, rel=1e-12)


def test_no_host_costs_is_the_model_before_them():
    """Presets have none; a model given empty host costs times every node the same bits."""
    p100 = machine_model("p100:1")
    assert p100.host_costs == {} and p100.with_host_costs({}) == p100
    g = graph_of(p100)
    a, b = simulate(g, p100, CostModel()), simulate(g, p100.with_host_costs({}), CostModel())
    assert a.makespan == b.makespan and np.array_equal(a.end, b.end)


def test_gpu_host_thread_is_the_bottleneck_when_tasks_are_tiny():
    """A GPU's tasks wait for their host thread: with host time per task far above the
    tasks' own, a device's iteration is at least its tasks' host time."""
    slow_host = {"task": HostCost(1e-2)}
    m = machine_model("p100:1").with_host_costs(slow_host)
    g = graph_of(m)
    res = simulate(g, m, CostModel())
    per_device = max(sum(1 for n in g.nodes if n.kind == "task" and n.device == d)
                     for d in range(m.num_devices))
    assert res.makespan >= per_device * 1e-2
    assert res.busy["host n0/d0"] == pytest.approx(
        1e-2 * sum(1 for n in g.nodes if n.kind == "task" and n.device == 0))
    # host phases appear on the host's track of the simulated trace
    events = trace_of(g, res, NodeTimer(m, CostModel()))
    assert any(e.track == "host n0/d0" for e in events)


def test_two_ranks_pay_send_and_recv_on_their_threads():
    m = cluster_model("two", CPU, 2).with_host_costs(COSTS)
    g = graph_of(m, standard.parameter_parallel)
    timer = NodeTimer(m, CostModel())
    kinds = {}
    for n in g.nodes:
        if n.kind == "copy" and timer.host(n.src) != timer.host(n.dst):
            hd, pre, pd, post = timer.host_phases(n)
            assert pre == (timer.compute(n.src),) and post == (timer.compute(n.dst),)
            assert hd == pytest.approx(COSTS["send"].time(n.nbytes))
            assert pd == pytest.approx(COSTS["recv"].time(n.nbytes))
            kinds["send"] = True
    assert kinds, "the strategy moves data between the ranks"


def test_machine_file_round_trips_host_costs():
    m = cluster_model("two", CPU, 2).with_host_costs(COSTS)
    d = to_dict(m)
    assert d["host_costs"]["send"] == {"seconds": 1e-5, "per_byte": 2e-10}
    assert from_dict(json.loads(json.dumps(d))) == m
    assert "host_costs" not in to_dict(machine_model("p100:1"))


@pytest.mark.parametrize("bad, message", [
    ({"tsk": {"seconds": 1e-5}}, "host cost 'tsk': not a node kind (did you mean 'task'"),
    ({"task": {"seconds": -1}}, "host cost 'task': \"seconds\" is -1"),
    ({"task": {"second": 1e-5}}, "unknown key 'second' (did you mean 'seconds'"),
    ({"task": 3e-5}, "host cost 'task': expected {\"seconds\""),
    ([1], "\"host_costs\" is [1]"),
])
def test_bad_host_costs_are_named(bad, message):
    d = to_dict(cluster_model("two", CPU, 2))
    d["host_costs"] = bad
    with pytest.raises(MachineFileError) as e:
        from_bytes(json.dumps(d).encode(), "m.json")
    assert message in str(e.value) and "m.json" in str(e.value)


def test_line_fit_recovers_seconds_and_per_byte_despite_outliers():
    xs = [1000 * k for k in range(1, 21)]
    ys = [5e-6 + 2e-10 * x for x in xs]
    ys[7] += 1e-2                                 # a message that waited
    ys[3] += 5e-3                                 # a preempted pack
    a, b = _line(xs, ys)
    assert a == pytest.approx(5e-6, rel=1e-6) and b == pytest.approx(2e-10, rel=1e-6)
    assert _line([8, 8, 8], [1.0, 2.0, 3.0]) == (2.0, 0.0)      # one size: the median


def test_typical_gap_leaves_out_waits_and_preemptions():
    # the median: a 12 ms preemption or wait among 10-40 us gaps moves it by one place
    assert _typical_gap([1e-5, 2e-5, 3e-5, 4e-5, 1.2e-2]) == pytest.approx(3e-5)
    assert _typical_gap([]) == 0.0


def test_contention_is_the_task_events_time_over_their_keys_times():
    from strategy.insitu import contention
    from strategy.costs import Measurement, Profile
    prof = Profile()
    prof.add("a", "cpu", Measurement(1e-3, 4, 1e-3, 5e-3))
    prof.add("b", "cpu", Measurement(2e-3, 2, 2e-3, 2e-3))
    # key a: typical 1 ms, one event preempted for 4 ms; key b: 2 ms, never preempted
    durations = {"a": [1e-3, 1e-3, 1e-3, 5e-3], "b": [2e-3, 2e-3]}
    assert contention(durations, prof) == pytest.approx((8e-3 + 4e-3) / (4e-3 + 4e-3))
    assert contention({"a": [1e-3, 1e-3]}, prof) == 1.0
    assert contention({}, prof) == 1.0


def test_insitu_times_leave_out_preempted_events():
    """A key's time is the median of its events, without those more than PREEMPTED times
    what the line from the profiler's times expects (one 10 ms event of a 0.3 ms task);
    keys the runs did not see are priced by that line."""
    from strategy.insitu import insitu_times
    from strategy.costs import Measurement, Profile
    base = Profile()
    for k, t in (("a", 1e-4), ("b", 2e-4), ("c", 4e-4), ("d", 3e-4)):
        base.add(k, "cpu", Measurement(t, 5, t, t))
    # in situ = 2 x alone, except one preempted event of c (10 ms) in two
    durations = {"a": [2e-4, 2e-4, 2e-4], "b": [4e-4, 4e-4], "c": [8e-4, 1e-2]}
    prof, (a, f), scaled = insitu_times(durations, base)
    assert (a, f) == pytest.approx((0.0, 2.0), abs=1e-9)
    assert prof.get("c", "cpu").seconds == pytest.approx(8e-4)       # the mean: 5.4 ms
    assert prof.get("a", "cpu").seconds == pytest.approx(2e-4)
    assert prof.get("d", "cpu").seconds == pytest.approx(6e-4) and scaled == 1


def test_insitu_times_price_unseen_keys_by_the_profilers_fastest_repeat():
    """On a loaded machine most of a profiled key's few repeats can be preempted (an AlexNet
    convolution's backward: 1.9 ms at best, 26.7 ms median of 5 at a load of 15): the line
    in-situ = a + f x alone is fitted to, and prices unseen keys from, the fastest repeat.
    (Failed on the medians: b's tilted the line to 0.2 ms + 0.007 x alone.)"""
    from strategy.insitu import alone_s, insitu_times
    from strategy.costs import Measurement, Profile
    base = Profile()
    for k, t in (("a", 1e-4), ("c", 4e-4)):
        base.add(k, "cpu", Measurement(t, 5, t, t))
    base.add("b", "cpu", Measurement(2.7e-2, 5, 2e-4, 3e-2))      # 3 of 5 repeats preempted
    base.add("d", "cpu", Measurement(2.7e-2, 5, 3e-4, 3e-2))
    assert alone_s(base, "d") == 3e-4 and alone_s(base, "a") == 1e-4
    assert alone_s(base, "nope") is None and alone_s(None, "a") is None
    durations = {"a": [2e-4, 2e-4, 2e-4], "b": [4e-4, 4e-4], "c": [8e-4, 8e-4]}
    prof, (a, f), scaled = insitu_times(durations, base)
    assert (a, f) == pytest.approx((0.0, 2.0), abs=1e-9)
    assert prof.get("d", "cpu").seconds == pytest.approx(6e-4) and scaled == 1


def test_unseen_long_keys_take_the_ratio_of_keys_as_long_in_the_profiler():
    """A key no run timed whose every profiler repeat was preempted is priced by the ratio
    of work to the profiler's time of the timed keys that were as long there (stretched
    alike), not of every long key: with a 2 ms key (work 3.7 ms in situ, long beside 16 ms
    slices at a load of 5) in the median, AlexNet's first convolution (53 ms in the
    profiler, 7 ms of work) was priced at 58 ms (the old rule: the median ratio of s and
    L)."""
    from strategy.insitu import price_unseen_long_keys
    from strategy.costs import Measurement, Profile
    base, prof = Profile(), Profile()
    for k, t in (("s", 1.75e-3), ("L", 50e-3), ("U", 52e-3), ("u", 2e-3)):
        base.add(k, "cpu", Measurement(t, 5, t, 1.5 * t))
    for k, t in (("s", 3.7e-3), ("L", 6.5e-3), ("U", 91e-3), ("u", 3.5e-3)):
        prof.add(k, "cpu", Measurement(t, 1, t, t))       # s, L timed; U, u by the line
    # slices of 16 ms at a load of 5: every repeat of a key over 4 ms was preempted
    assert price_unseen_long_keys(prof, base, {"s", "L"}, {"s", "L"}, 5.0, 16e-3) == 1
    assert prof.get("U", "cpu").seconds == pytest.approx(6.5e-3 / 50e-3 * 52e-3)
    assert prof.get("u", "cpu").seconds == 3.5e-3               # short in the profiler
    # no timed key as long in the profiler: its repeats stretched by the runs' load
    prof.add("U", "cpu", Measurement(91e-3, 1, 91e-3, 91e-3))
    assert price_unseen_long_keys(prof, base, {"s"}, {"s", "L"}, 5.0, 16e-3) == 1
    assert prof.get("U", "cpu").seconds == pytest.approx(52e-3 / 5)
    # no slice seen (a quiet machine): nothing is long
    assert price_unseen_long_keys(prof, base, {"s", "L"}, {"s", "L"}, 5.0, 0.0) == 0


def test_fit_host_costs_adds_the_gap_to_the_host_work():
    samples = {"task": [(1e-5, 0.0, 0), (3e-5, 0.0, 0), (None, 0.0, 0)],
               "send": [(2e-6, 1e-5 + 1e-9 * n, n) for n in (100, 1000, 10000)]}
    costs, counts, spread = fit_host_costs(samples)
    assert costs["task"] == HostCost(2e-5, 0.0)
    assert costs["send"].seconds == pytest.approx(1.2e-5)
    assert costs["send"].per_byte == pytest.approx(1e-9)
    assert counts == {"task": 3, "send": 3}


def test_iteration_factor_scales_task_times_and_host_costs():
    from strategy.calibration import with_factor
    from strategy.costs import Measurement, Profile
    prof = Profile()
    prof.add(("k",), "cpu", Measurement(2e-3, 3, 1e-3, 4e-3))
    m = cluster_model("two", CPU, 2).with_host_costs(COSTS)
    m2, p2 = with_factor(m, prof, 1.5)
    got = p2.get(("k",), "cpu")
    assert (got.seconds, got.repeats, got.min_s, got.max_s) == \
        pytest.approx((3e-3, 3, 1.5e-3, 6e-3), rel=1e-12)
    send = m2.host_costs["send"]
    assert (send.seconds, send.per_byte) == pytest.approx((1.5e-5, 3e-10), rel=1e-12)
    assert m2.calibration["from_traces"]["iteration_factor"] == 1.5
    assert m2.device(0) == m.device(0) and m2.links == m.links


def test_a_rare_long_wait_is_shared_by_the_long_keys_of_its_run():
    """A long key's work is the mean of its events / the run's load, each event capped at
    load x its typical time + 2 slices, and the time cut off shared by the run's long keys
    in proportion to their capped events: a 30 ms wait landing on one of 36 events of a
    100 us key is spread over every long key of the run, not priced into that key (each
    key's own mean, the old rule, gives a 465 us and b 200 us: a/b 2.3, typically 0.5)."""
    from strategy.insitu import deflate
    from strategy.costs import Measurement, Profile
    prof = Profile()
    for k, t in (("a", 1e-4), ("b", 2e-4), ("s", 1e-5)):
        prof.add(k, "cpu", Measurement(t, 1, t, t))
    durations = {"a": [1e-4] * 35 + [30e-3], "b": [2e-4] * 40, "s": [1e-5] * 3}
    slice_s = 4e-4                  # at a load of 2, long from 100 us: a and b, not s
    assert deflate([(durations, 2.0)], prof, None, slice_s) == 2.0
    a, b = prof.get("a", "cpu").seconds, prof.get("b", "cpu").seconds
    # a's 30 ms event capped at 2 x 100 us + 2 slices = 1 ms
    assert a / b == pytest.approx((35e-4 + 1e-3) / 36 / 2e-4)
    # the long keys' events / the load are kept in total
    assert 36 * a + 40 * b == pytest.approx((35e-4 + 30e-3 + 80e-4) / 2.0)
    assert prof.get("s", "cpu").seconds == 1e-5         # short: its median stays


def test_a_key_long_in_one_run_keeps_the_events_of_the_runs_where_it_is_short():
    """A key long beside a slice in one run (at a load of 1.14 with 0.12 ms slices, from
    0.2 ms) and short in the others (a load of 1.00: nothing is long) is priced by all its
    events, weighted by their number: its pooled work in the loaded run, its median in the
    quiet ones. (Failed before: the one loaded run's 12 events, 5.9 ms / 1.14, priced
    RNNLM's LSTM backward at 190 us where its other 168 events said 281 us.)"""
    from strategy.insitu import deflate
    from strategy.costs import Measurement, Profile
    prof = Profile()
    prof.add("k", "cpu", Measurement(2.8e-4, 1, 2.8e-4, 2.8e-4))
    loaded = {"k": [2.28e-4] * 12}                  # work 200 us x the load of 1.14
    quiet = {"k": [2.8e-4] * 100 + [9e-4] * 4}      # its median, not its mean
    assert deflate([(loaded, 1.14), (quiet, 1.0), (quiet, 1.0)], prof, None, 1.2e-4) == 1.0
    want = (12 * 2e-4 + 208 * 2.8e-4) / 220
    assert prof.get("k", "cpu").seconds == pytest.approx(want)
    # a key long in every run it ran in keeps its pooled work alone
    prof.add("k", "cpu", Measurement(2.8e-4, 1, 2.8e-4, 2.8e-4))
    deflate([(loaded, 1.14)], prof, None, 1.2e-4)
    assert prof.get("k", "cpu").seconds == pytest.approx(2e-4)


def test_keys_no_run_timed_are_priced_by_the_line_fitted_to_work():
    """With the loads known, the keys no run timed get the line work = a + f x alone fitted
    to the timed keys' work (one point per key), not insitu_times' line fitted to their
    events, whose slope holds the runs' load: priced by that, a strategy never run paid the
    load twice (old code: u at 4.4x alone, the events' line, here)."""
    from strategy.insitu import deflate, insitu_times
    from strategy.costs import Measurement, Profile
    base = Profile()
    for k, t in (("a", 1e-5), ("b", 2e-5), ("c", 6e-5), ("u", 4e-5), ("L", 9e-3)):
        base.add(k, "cpu", Measurement(t, 5, t, t))
    # work = 2 x alone; at a load of 2 with slices of 0.4 ms, c (120 us of work) is long
    # (every event stretched by the load), a and b short (their events are their work)
    durations = {"a": [2e-5] * 4, "b": [4e-5] * 4, "c": [2.4e-4] * 4}
    prof, (a0, f0), scaled = insitu_times(durations, base)
    assert f0 == pytest.approx(4.4) and scaled == 2             # u, L priced by events
    deflate([(durations, 2.0)], prof, base, 4e-4)
    assert prof.get("u", "cpu").seconds == pytest.approx(2 * 4e-5)
    for k in ("a", "b", "c"):                                   # timed: their work
        assert prof.get(k, "cpu").seconds == pytest.approx(2 * base.get(k, "cpu").seconds)
    # L, long in the profiler (all its repeats preempted), is priced by its own rule
    assert prof.get("L", "cpu").seconds == pytest.approx(9e-3 / 2)
