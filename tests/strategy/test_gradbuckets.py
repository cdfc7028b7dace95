"""The MPI executor's gradient buckets in a calibrated prediction (strategy/gradbuckets.py):
a bucket's all-reduces start together when its last member is ready, its collective's wait
is read from a recorded run's events, and it holds the links, not the ranks' threads;
hand-built graphs with exact times."""
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from strategy.gradbuckets import (bucket_collectives, bucketed, buckets_of,
                                  collective_wait, collective_waits, size_x, wait_of)
from strategy.machines.specs import HostCost
from strategy.preemption import PreemptedTimer, expected_makespan
from strategy.simulator import simulate

sys.path.insert(0, str(Path(__file__).parent))
from sim_graphs import HandGraph  # noqa: E402
from test_wakeups import cpu_lab  # noqa: E402
from strategy.costs import Measurement  # noqa: E402

HOST = {"task": HostCost(0.0, 0.0), "allreduce_start": HostCost(1e-5, 0.0),
        "allreduce_wait": HostCost(1e-5, 0.0)}


def two_gradients(elements: int = 250):
    """Ranks 0 and 1 each compute gradient g1 (1 ms), then g2 (1 ms) once rank 2's task x
    (3 ms) is done: their threads are free from 1 to 3 ms; each gradient is all-reduced over
    ranks 0 and 1 (one bucket: same ranks, same dtype); an update uses each."""
    m = cpu_lab().with_host_costs(HOST)
    h = HandGraph(m)
    x = h.task("x", 2, 3e-3)
    g1 = [h.task(f"g1_{d}", d, 1e-3) for d in (0, 1)]
    g2 = [h.task(f"g2_{d}", d, 1e-3, preds=[g1[d], x]) for d in (0, 1)]
    timed = [(x, 3e-3)] + [(i, 1e-3) for i in g1 + g2]
    h.g2 = g2
    r1, r2 = h.region("w1", elements), h.region("w2", elements)
    a1 = h.allreduce(r1, (0, 1), preds=g1)
    a2 = h.allreduce(r2, (0, 1), preds=g2)
    ups = [h.task(f"up{k}_{d}", d, 1e-4, preds=[a]) for k, a in ((1, a1), (2, a2))
           for d in (0, 1)]
    timed += [(i, 1e-4) for i in ups]
    for i, t in timed:
        h.profile.add(h.graph.nodes[i].cost_key, "cpu", Measurement(t))
    return m, h, a1, a2, ups


def test_a_buckets_members_start_when_its_last_member_is_ready():
    m, h, a1, a2, _ = two_gradients()
    buckets = buckets_of(h.graph)
    assert buckets == [(a1, a2)]
    assert buckets_of(h.graph, max_bytes=1000) == [(a1,), (a2,)]     # 1000 B each: apart
    costs = h.costs()
    timer = PreemptedTimer(m, costs, 1.0, 0.0)
    node_by_node = simulate(h.graph, m, costs, timer)
    assert node_by_node.start[a1] < 1.1e-3                 # on its own: after g1
    fused = simulate(bucketed(h.graph, buckets), m, costs, timer)
    assert fused.start[a1] >= 4e-3                          # with g2: after both gradients
    assert fused.start[a2] == pytest.approx(fused.start[a1] + 1e-5)   # its start: 10 us
    assert fused.makespan > node_by_node.makespan - 1e-12
    assert bucketed(h.graph, [(a1,), (a2,)]) is h.graph    # nothing fused: the same graph


def recorded(h, events):
    return SimpleNamespace(graph=h.graph, events=[
        {"ph": "X", "pid": rank, "ts": t * 1e3, "dur": d * 1e3, "args": {"node": i}}
        for rank, i, t, d in events])                        # t, d in ms


def test_a_collectives_wait_runs_to_the_last_rank_that_sees_it():
    m, h, a1, a2, ups = two_gradients()
    up1_0, up1_1, up2_0, up2_1 = ups
    run = recorded(h, [
        (0, a1, 1.0, 0.01), (1, a1, 1.2, 0.01),
        (0, a2, 4.0, 0.01), (1, a2, 5.19, 0.01),              # last start ends at 5.2 ms
        (0, up1_0, 8.0, 0.1), (0, up2_0, 8.1, 0.1),           # rank 0 sees it at 8 ms
        (1, up2_1, 12.0, 0.1), (1, up1_1, 12.1, 0.1)])        # rank 1 at 12 ms
    waits = collective_waits(run, lambda nodes: 0.5e-3 * len(nodes))
    assert waits == [(2, 2000, pytest.approx(12e-3 - 5.2e-3 - 1e-3))]
    assert collective_wait([recorded(h, [(0, up1_0, 1.0, 0.1)])], lambda n: 0.0) is None


def test_a_collectives_wait_is_a_line_in_its_size():
    def bucket_waiting(elements, wait_ms):
        m, h, a1, a2, ups = two_gradients(elements)
        return recorded(h, [(0, a1, 1.0, 0.0), (1, a2, 2.0, 0.0),
                            (0, ups[0], 2.0 + wait_ms, 0.1), (1, ups[3], 2.0 + wait_ms, 0.1)])
    small, large = bucket_waiting(128, 3.0), bucket_waiting(384, 5.0)   # 1 KiB, 3 KiB
    assert size_x(1024) == 1.0 and size_x(3072) == 2.0
    a, f = collective_wait([small, large, small], lambda nodes: 0.0)[2]
    assert (a, f) == (pytest.approx(1e-3), pytest.approx(2e-3))
    assert collective_wait([small, small], lambda nodes: 0.0) == {2: (pytest.approx(3e-3), 0.0)}


def test_a_sizes_wait_scales_by_its_rounds_where_not_measured():
    waits = {2: (2e-3, 0.0), 4: (4e-3, 1e-3)}
    assert wait_of(waits, 4, 3072) == pytest.approx(6e-3)
    assert wait_of(waits, 8, 3072) == pytest.approx(9e-3)   # 3 rounds against 2
    assert wait_of({4: (10e-3, 0.0)}, 2, 0) == pytest.approx(5e-3)


def test_the_wait_holds_neither_the_ranks_threads_nor_the_links():
    m, h, a1, a2, ups = two_gradients()
    costs = h.costs()
    free = h.task("other", 0, 2e-3, preds=[h.g2[0]])       # rank 0's work during the wait
    h.profile.add(h.graph.nodes[free].cost_key, "cpu", Measurement(2e-3))
    message = h.copy(h.region("msg", 250), 0, 1, preds=[free])   # and a message on the links
    g = bucketed(h.graph, buckets_of(h.graph))
    timer = PreemptedTimer(m, costs, 1.0, 0.0)
    before = simulate(g, m, costs, timer)
    held = bucket_collectives(g, buckets_of(g), {2: (6e-3, 0.0)})
    bucket = ("collective", a1)
    assert held == {a1: (bucket, 6e-3), a2: (bucket, 0.0)}   # the first member waits
    late = PreemptedTimer(m, costs, 1.0, 0.0, collectives=held)
    after = simulate(g, m, costs, late)
    assert after.run[a1] == before.run[a1]
    for a in (a1, a2):                        # the whole bucket ends 6 ms past its post
        assert after.end[a] >= after.run[a1] + 6e-3
        assert before.end[a] < before.run[a1] + 2.1e-3
    assert before.start[free] < before.end[a1]              # it ran during the bucket ...
    assert after.end[free] <= before.end[free]             # ... and still does
    assert after.run[message] < after.end[a1]                 # on the links during the wait
    assert after.end[message] <= before.end[message] + 1e-12  # ... as soon as before
    assert after.makespan > before.makespan + 3.9e-3
    assert expected_makespan(g, m, costs, 1.0, 0.0, collectives=held) == \
        pytest.approx(after.makespan, rel=1e-12)


def test_a_calibrations_prediction_fuses_the_bucket_and_holds_its_wait():
    from strategy.calibration import Fit, predict
    m, h, a1, a2, _ = two_gradients()
    fit = Fit(dict(HOST), {}, {}, 2, work=(m, h.profile), ranks=2)
    costs = h.costs()
    node_by_node = simulate(h.graph, m, costs, PreemptedTimer(m, costs, 1.0, 0.0)).makespan
    fused = simulate(bucketed(h.graph, buckets_of(h.graph)), m, costs,
                     PreemptedTimer(m, costs, 1.0, 0.0)).makespan
    assert predict(fit, h.graph, {}, 2, 1) == pytest.approx(fused, rel=1e-12)
    assert fused > node_by_node + 1e-4
    fit.collective_s = {2: (6e-3, 0.0)}
    assert predict(fit, h.graph, {}, 2, 1) == pytest.approx(fused + 6e-3, abs=2e-5)
    assert predict(fit, h.graph, {}, 2, 1, wakeups=False) == pytest.approx(fused, rel=1e-12)


def test_a_model_without_host_costs_is_refused_rather_than_scheduled_out_of_order():
    from strategy.calibration import CalibrationError, Fit, predict
    m, h, a1, a2, _ = two_gradients()
    bare = m.with_host_costs({})
    fit = Fit({}, {}, {}, 2, work=(bare, h.profile), ranks=2)
    with pytest.raises(CalibrationError, match="gradient buckets"):
        predict(fit, h.graph, {}, 2, 1)
