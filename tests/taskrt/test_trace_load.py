"""The OS's load over a traced iteration (taskrt.trace.LoadMeter): recorded per rank in the
trace as a metadata event, and the contention it gives ((CPU + run-queue wait) / CPU)."""
import pytest

from taskrt.trace import LOAD_EVENT, LoadMeter, TraceEvent, contention_of, sched_times, \
    to_chrome


def test_load_meter_records_cpu_wait_wall_and_load_average():
    meter = LoadMeter().start()
    x = 0
    for i in range(100000):
        x += i
    rec = meter.stop()
    assert set(rec) == {"wall_s", "cpu_s", "wait_s", "loadavg"}
    assert rec["cpu_s"] > 0 and rec["wall_s"] > 0
    if sched_times() is None:
        assert rec["wait_s"] is None
    else:
        assert rec["wait_s"] >= 0


def test_to_chrome_keeps_the_load_as_a_metadata_event():
    ev = [TraceEvent(0, "task", "t", "device 0", 0.0, 1e-3)]
    load = {"wall_s": 0.3, "cpu_s": 0.1, "wait_s": 0.2, "loadavg": 7.5}
    out = to_chrome(ev, load=load)["traceEvents"]
    marks = [e for e in out if e.get("name") == LOAD_EVENT]
    assert marks == [{"ph": "M", "pid": 0, "name": LOAD_EVENT, "args": load}]
    assert not [e for e in to_chrome(ev)["traceEvents"] if e.get("name") == LOAD_EVENT]


def test_contention_is_cpu_plus_wait_over_cpu_summed_over_ranks():
    ranks = [{"cpu_s": 1.0, "wait_s": 2.0}, {"cpu_s": 1.0, "wait_s": 0.0}]
    assert contention_of(ranks) == pytest.approx(2.0)
    assert contention_of([{"cpu_s": 0.5, "wait_s": 0.0}]) == 1.0       # an idle core
    assert contention_of([{"cpu_s": 1.0, "wait_s": None}]) is None    # no schedstat
    assert contention_of([{"cpu_s": 0.0, "wait_s": 1.0}]) is None     # no CPU time
    assert contention_of([]) is None
