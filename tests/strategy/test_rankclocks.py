"""The ranks of a recorded run put on one clock (strategy/rankclocks.py): each MPI rank
stamps its events from its own start; what the graph orders across ranks (a copy's unpack
after its sender began it, an all-reduce's user after every member posted it) bounds each
rank's offset, and the offset nearest 0 within the bounds is taken. Hand-built graphs with
stamps planted off by a known amount, and a real 2-rank AlexNet run recorded under mpirun
whose rank 1 is moved 50 ms off before the calibration loads it: by the stamps' origins the
ranks recorded (one host), and by the orderings without them."""
import json
import os
import sys
from pathlib import Path

import pytest

from strategy.cores import overlap, recorded_intervals
from strategy.rankclocks import clock_offsets, on_one_clock, ordering_bounds
from taskrt.trace import LOAD_EVENT

sys.path.insert(0, str(Path(__file__).parent))
from sim_graphs import HandGraph  # noqa: E402
from test_wakeups import cpu_lab  # noqa: E402


def events(rows, late_ms=0.0, rank=1):
    """Trace events of (rank, node, start ms, duration ms) on one clock; `rank`'s stamped
    from its own start, late_ms after rank 0's (stamps late_ms smaller)."""
    return [{"ph": "X", "pid": r, "ts": (t - (late_ms if r == rank else 0.0)) * 1e3,
             "dur": d * 1e3, "args": {"node": i}} for r, i, t, d in rows]


def exchange():
    """Rank 0 computes a (1 ms), sends it to rank 1 and computes d (2 ms); rank 1 computes b
    on it (2 ms) and sends the result back to rank 0's e."""
    h = HandGraph(cpu_lab())
    x, y = h.region("x", 250), h.region("y", 250)
    a = h.task("a", 0, 1e-3)
    c01 = h.copy(x, 0, 1, preds=[a])
    d = h.task("d", 0, 2e-3, preds=[a])
    b = h.task("b", 1, 2e-3, preds=[c01])
    c10 = h.copy(y, 1, 0, preds=[b])
    e = h.task("e", 0, 0.5e-3, preds=[c10, d])
    return h.graph, (a, c01, d, b, c10, e)


def exchange_rows(send_ms=0.05):
    g, (a, c01, d, b, c10, e) = exchange()
    return g, [(0, a, 0.0, 1.0), (0, c01, 1.0, send_ms), (0, d, 1.0 + send_ms, 2.0),
               (1, c01, 1.2, 0.05), (1, b, 1.25, 2.0), (1, c10, 3.25, 0.05),
               (0, c10, 3.4, 0.05), (0, e, 3.45, 0.5)]


def test_a_rank_that_began_late_is_moved_the_least_its_messages_ask():
    g, rows = exchange_rows()
    late = events(rows, late_ms=1.0)              # rank 1 began 1 ms after rank 0
    # unpack of c01 (0.2 ms on rank 1's stamps) after its send began (1.0): off >= 0.8 ms;
    # the send of c10 (2.25) began before its unpack (3.4): off <= 1.15 ms
    assert ordering_bounds(g, late) == {(0, 1): pytest.approx(800.0),
                                        (1, 0): pytest.approx(-1150.0)}
    assert clock_offsets(g, late) == {0: 0.0, 1: pytest.approx(800.0)}
    moved = on_one_clock(g, late)
    assert all(c <= 1e-9 for c in ordering_bounds(g, moved).values())
    # the ranks' overlap (cores.py) read from the moved stamps is close to the true one
    true = overlap(recorded_intervals(events(rows)))
    raw = overlap(recorded_intervals(late))
    got = overlap(recorded_intervals(moved))
    assert abs(got[1][1] - true[1][1]) < 0.1 < abs(raw[1][1] - true[1][1])
    assert on_one_clock(g, events(rows)) == events(rows)      # on one clock already


def test_a_send_the_os_preempted_bounds_by_its_start():
    """The Isend is posted inside the sender's event: an event the OS stretched past the
    unpack (3 ms here) still only says the unpack came after the event began."""
    g, rows = exchange_rows(send_ms=3.0)
    late = events(rows, late_ms=1.0)
    bounds = ordering_bounds(g, late)
    assert bounds[(0, 1)] == pytest.approx(800.0)             # not 4.0 - 0.2 = 3.8 ms
    assert clock_offsets(g, late)[1] == pytest.approx(800.0)


def data_parallel(late_ms):
    """Two ranks compute a gradient each, all-reduce it over both and update with it; rank 1
    began late_ms after rank 0 (negative: before)."""
    h = HandGraph(cpu_lab())
    w = h.region("w", 250)
    g0, g1 = h.task("g0", 0, 1e-3), h.task("g1", 1, 1e-3)
    ar = h.allreduce(w, (0, 1), preds=[g0, g1])
    u0, u1 = h.task("u0", 0, 1e-4, preds=[ar]), h.task("u1", 1, 1e-4, preds=[ar])
    rows = [(0, g0, 0.0, 1.0), (1, g1, 0.5, 1.0), (0, ar, 1.0, 0.01), (1, ar, 1.5, 0.01),
            (0, u0, 3.0, 0.1), (1, u1, 3.2, 0.1)]
    return h.graph, events(rows, late_ms=late_ms)


def test_stamps_nothing_contradicts_are_kept():
    """The all-reduce's users started long after both posts: the bounds leave the offset
    open from -2.2 to +1.5 ms, and the stamps stay as recorded (not the middle of it)."""
    g, evs = data_parallel(0.0)
    assert ordering_bounds(g, evs) == {(0, 1): pytest.approx(-2200.0),
                                       (1, 0): pytest.approx(-1500.0)}
    assert clock_offsets(g, evs) == {0: 0.0, 1: 0.0}
    assert on_one_clock(g, evs) is evs


def test_a_rank_that_waited_at_the_first_all_reduce_is_moved_back():
    """Rank 1 began 522 ms before rank 0 and waited for it at the first all-reduce (as
    Inception-v3 data parallel's ranks did once on 2 ranks): its users' stamps come before
    rank 0's post, which the move undoes."""
    g, evs = data_parallel(-522.0)
    off = clock_offsets(g, evs)
    assert -522.0e3 - 2200.0 <= off[1] <= -522.0e3 + 1500.0   # its true -522 ms inside
    assert off[1] == pytest.approx(-522.0e3 + 1500.0)         # the nearest 0 it may be
    assert all(c <= 1e-9 for c in ordering_bounds(g, on_one_clock(g, evs)).values())


@pytest.fixture(scope="module")
def two_rank_trace(tmp_path_factory):
    """A real AlexNet --small run on 2 ranks (data parallel: an all-reduce per gradient)."""
    sys.path.insert(0, str(Path(__file__).parent.parent))
    from mpi_launch import ROOT, run_mpi
    path = tmp_path_factory.mktemp("rankclocks") / "dp.json"
    rc, text, _ = run_mpi(2, [os.path.join(ROOT, "apps", "alexnet.py"), "--small",
                              "--iterations", "1", "--warmup", "1", "--quiet",
                              "--trace", str(path)], timeout=300)
    assert rc == 0, text
    return path


def _loads(data):
    return {e["pid"]: e["args"] for e in data["traceEvents"]
            if e.get("ph") == "M" and e.get("name") == LOAD_EVENT}


def test_ranks_of_one_host_are_put_on_one_clock_by_their_recorded_origins(two_rank_trace,
                                                                           tmp_path):
    """Each rank records its stamps' origin on the host's monotonic clock: with rank 1's
    stamps moved 50 ms later and its origin 50 ms earlier (the same instants), load_runs
    gives every event the instant the origins say, to the microsecond, and every cross-rank
    ordering holds; the orderings alone would move it the least they allow instead."""
    from strategy.calibration import load_runs
    data = json.load(open(two_rank_trace))
    loads = _loads(data)
    assert set(loads) == {0, 1} and loads[0]["host"] == loads[1]["host"]
    true_offset = (loads[1]["clock_origin_s"] - loads[0]["clock_origin_s"]) * 1e6
    original = {(e["args"]["node"], e["ts"]) for e in data["traceEvents"]
                if e.get("ph") == "X" and e.get("pid") == 1 and "node" in e.get("args", {})}
    for e in data["traceEvents"]:
        if e.get("ph") == "X" and e.get("pid") == 1:
            e["ts"] += 50e3
    loads[1]["clock_origin_s"] -= 0.05
    moved = tmp_path / "moved.json"
    json.dump(data, open(moved, "w"))
    run = load_runs([str(moved)])[0]
    got = sorted((e["args"]["node"], e["ts"]) for e in run.events
                 if e.get("ph") == "X" and e.get("pid") == 1 and "node" in e["args"])
    want = sorted((i, ts + true_offset) for i, ts in original)
    assert [i for i, _ in got] == [i for i, _ in want]
    assert all(abs(a - b) < 1e-3 for (_, a), (_, b) in zip(got, want))
    assert all(c <= 1e-6 for c in ordering_bounds(run.graph, run.events).values())


def test_the_calibration_loads_a_real_two_rank_run_on_one_clock(two_rank_trace, tmp_path):
    """The same run without the recorded origins (a trace from before them, or of ranks on
    several hosts), its rank 1's stamps moved 50 ms later in the file; load_runs puts them
    back by the graph's orderings so that every cross-rank ordering holds."""
    from strategy.calibration import load_runs
    data = json.load(open(two_rank_trace))
    for args in _loads(data).values():
        del args["clock_origin_s"]
    for e in data["traceEvents"]:
        if e.get("ph") == "X" and e.get("pid") == 1:
            e["ts"] += 50e3
    moved = tmp_path / "moved.json"
    json.dump(data, open(moved, "w"))
    run = load_runs([str(moved)])[0]
    bounds = ordering_bounds(run.graph, run.events)
    assert bounds and all(c <= 1e-6 for c in bounds.values())
    before = ordering_bounds(run.graph, data["traceEvents"])
    assert max(before.values()) > 10e3                         # the plant broke them
