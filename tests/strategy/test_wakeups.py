"""Waiting ranks that sleep (strategy/wakeups.py): a message to a rank with nothing to run is
seen at the rank's next wake-up, half a sleep late on average, by the executor's own sleep
schedule; hand-built timelines with exact times."""
import sys
from pathlib import Path

import pytest

from strategy.machines.specs import HostCost
from strategy.preemption import PreemptedTimer, expected_makespan
from strategy.simulator import simulate
from strategy.wakeups import SleepSchedule, executor_schedule, traced_schedule, wake_delays

sys.path.insert(0, str(Path(__file__).parent))
from sim_graphs import HandGraph, lab, lab_dict  # noqa: E402
from strategy.costs import Measurement  # noqa: E402
from strategy.machines import from_dict  # noqa: E402

HOST = {"task": HostCost(0.0, 0.0), "send": HostCost(1e-5, 0.0), "recv": HostCost(2e-5, 0.0)}
SLEEPY = SleepSchedule(spin_s=0.0, first_s=2e-5, max_s=1e-3, overshoot_s=5e-5)


def test_a_message_waits_half_the_sleep_it_arrives_in():
    s = SLEEPY
    # sleeps of 70, 90, 130, 210, 370, 690, 1050, 1050 ... us (asked + 50 us overshoot)
    assert s.delay(0.0) == pytest.approx(35e-6)
    assert s.delay(69e-6) == pytest.approx(35e-6)
    assert s.delay(71e-6) == pytest.approx(45e-6)          # in the second sleep
    assert s.delay(70e-6 + 90e-6 + 130e-6 + 1e-6) == pytest.approx(105e-6)
    assert s.delay(0.5) == pytest.approx(525e-6)          # long idle: 1 ms sleeps
    spinning = SleepSchedule(spin_s=1e-3, first_s=2e-5, max_s=2e-4, overshoot_s=5e-5)
    assert spinning.delay(0.9e-3) == 0.0                  # still yielding: seen at once
    assert spinning.delay(1e-3) == pytest.approx(35e-6)
    with pytest.raises(ValueError, match="first_s"):
        SleepSchedule(0.0, 0.0, 1e-3, 5e-5)


def test_the_executors_schedule_follows_its_policy():
    crowded = executor_schedule(4, 2, 0.0, overshoot_s=5e-5)   # 4 ranks on 2 cores
    assert (crowded.spin_s, crowded.first_s, crowded.max_s) == (0.0, 2e-5, 1e-3)
    roomy = executor_schedule(2, 2, 0.0, overshoot_s=5e-5)     # a core each
    assert (roomy.spin_s, roomy.max_s) == (1e-3, 2e-4)


class _Run:
    """A calibrating run as traced_schedule reads it: its ranks and its trace's events."""
    def __init__(self, loads, ranks=2):
        self.ranks, self.path = ranks, "run.json"
        self.events = [{"ph": "M", "name": "soapflow_load", "args": a} for a in loads]


def test_the_calibration_takes_the_schedule_the_traces_recorded():
    own = {"spin_s": 1e-3, "poll_max_s": 2e-4, "ranks_here": 2, "cores": 2, "others": 0.0,
           "source": "runnable threads", "given": []}
    shared = dict(own, spin_s=0.0, poll_max_s=1e-3, others=1.6)
    # load averages of 2.1-2.4 (the job's own previous runs): the old reading gave the shared
    # schedule, which these runs did not follow
    runs = [_Run([{"loadavg": 2.4, "schedule": own}, {"loadavg": 2.4, "schedule": own}]),
            _Run([{"loadavg": 2.1, "schedule": own}, {"loadavg": 2.1, "schedule": own}]),
            _Run([{"loadavg": 2.2, "schedule": shared}, {"loadavg": 2.2, "schedule": shared}])]
    s = traced_schedule(runs, 2, 2, overshoot_s=5e-5)
    assert (s.spin_s, s.first_s, s.max_s, s.overshoot_s) == (1e-3, 2e-5, 2e-4, 5e-5)
    # traces from before the record: the executor's old reading of their load averages
    old = [_Run([{"loadavg": 2.4}, {"loadavg": 2.4}]), _Run([{"loadavg": 2.1}])]
    assert traced_schedule(old, 2, 2, 5e-5) == executor_schedule(2, 2, 0.4, 5e-5)
    assert traced_schedule(old[:1] + runs, 2, 2, 5e-5).spin_s == 0.0   # one without: old rule


@pytest.mark.parametrize("bad", [{"spin_s": 1e-3}, {"spin_s": "x", "poll_max_s": 2e-4},
                                 {"spin_s": 1e-3, "poll_max_s": 0},
                                 {"spin_s": -1.0, "poll_max_s": 2e-4}])
def test_a_malformed_schedule_record_is_named_not_read(bad):
    with pytest.raises(ValueError, match=r"trace run\.json: .*'schedule'.*poll_max_s > 0"):
        traced_schedule([_Run([{"loadavg": 1.0, "schedule": bad}])], 2, 2, 5e-5)


def chain():
    """d0 computes 1 ms, sends to d1 (idle since 0), which then computes 1 ms."""
    m = lab(uniform=True).with_host_costs(HOST)
    h = HandGraph(m)
    region = h.region("x", 250)                       # 1000 bytes: 1 us + 1 us a hop
    a = h.task("a", 0, 1e-3)
    c = h.copy(region, 0, 1, preds=[a])
    b = h.task("b", 1, 1e-3, preds=[c])
    return m, h, c, b


def test_an_idle_receiver_sees_the_message_at_its_next_wake_up():
    m, h, c, b = chain()
    costs = h.costs()
    timer = PreemptedTimer(m, costs, 1.0, 0.0)
    before = simulate(h.graph, m, costs, timer)
    d, _ = timer.timing(h.graph.nodes[c])
    arrival = before.run[c] + d                       # 1 ms + send 10 us + the transfer
    delays = wake_delays(h.graph, before, timer, SLEEPY)
    assert delays == {c: pytest.approx(SLEEPY.delay(arrival))}
    # sleeps end at 70, 160, 290, 500, 870, 1560 us: it arrives in the 690 us one
    assert SLEEPY.delay(arrival) == pytest.approx(345e-6)
    after = simulate(h.graph, m, costs, PreemptedTimer(m, costs, 1.0, 0.0, delays=delays))
    assert after.makespan == pytest.approx(before.makespan + 345e-6, rel=1e-12)
    assert expected_makespan(h.graph, m, costs, 1.0, 0.0, delays=delays) == \
        pytest.approx(after.makespan, rel=1e-12)


def cpu_lab():
    """lab with CPU devices: each rank's one thread runs its tasks."""
    d = lab_dict(uniform=True)
    d["device_specs"] = {"cpu": d["device_specs"]["X"]}
    d["node_types"]["box"]["devices"] = ["cpu"] * 4
    return from_dict(d, "lab").with_host_costs(HOST)


def cpu_chain(busy_s: float | None = None):
    """chain() on cpu_lab with its tasks' times measured; with busy_s, d1 also runs a task
    of busy_s, made before the message arrives."""
    m = cpu_lab()
    h = HandGraph(m)
    region = h.region("x", 250)
    timed = [(h.task("a", 0, 1e-3), 1e-3)]
    c = h.copy(region, 0, 1, preds=[timed[0][0]])
    if busy_s is not None:
        timed.append((h.task("busy", 1, busy_s), busy_s))
    timed.append((h.task("b", 1, 1e-3, preds=[c]), 1e-3))
    for i, t in timed:
        h.profile.add(h.graph.nodes[i].cost_key, "cpu", Measurement(t))
    return m, h


def test_a_busy_receiver_waits_for_no_wake_up():
    m, h = cpu_chain(busy_s=5e-3)                     # d1 works while the message comes
    costs = h.costs()
    timer = PreemptedTimer(m, costs, 1.0, 0.0)
    assert wake_delays(h.graph, simulate(h.graph, m, costs, timer), timer, SLEEPY) == {}


def test_a_calibrations_prediction_holds_the_wake_up_and_its_work_does_not():
    from strategy.calibration import Fit, predict
    m, h = cpu_chain()
    fit = Fit(dict(HOST), {}, {}, 2, work=(m, h.profile), ranks=4, sleep=SLEEPY)
    awake = predict(fit, h.graph, {}, 4, 1, wakeups=False)
    assert predict(fit, h.graph, {}, 4, 1) == pytest.approx(awake + 345e-6, rel=1e-9)
    assert predict(Fit(dict(HOST), {}, {}, 2, work=(m, h.profile), ranks=4), h.graph, {},
                   4, 1) == pytest.approx(awake, rel=1e-12)      # no schedule: no wait
