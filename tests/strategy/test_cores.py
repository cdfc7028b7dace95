"""Ranks sharing cores (strategy/cores.py): each rank's contention is (ranks working beside
it + the machine's other runnable threads) / cores, from exact overlaps of hand-built
timelines, and the background fitted to recorded runs."""
from types import SimpleNamespace

import pytest

from parallel_ops.lowering import lower
from strategy import standard
from strategy.costs.app_profile import load_app
from strategy.machines.specs import DeviceSpec, HostCost
from strategy.cores import (background, contention_of_overlap, overlap, per_thread_contention,
                            sharing)
from strategy.costs import CostModel
from strategy.machines import cluster_model
from strategy.preemption import PreemptedTimer, expected_makespan
from taskrt import plan
from taskrt.trace import LOAD_EVENT

CPU = DeviceSpec("cpu", 1e10, 1e9, 5e10, 1e10, 1 << 34, 5e-6)
HOST = {"task": HostCost(2e-5, 0.0), "copy": HostCost(3e-5, 0.0), "send": HostCost(5e-5, 0.0),
        "recv": HostCost(4e-5, 0.0), "reduce": HostCost(3e-5, 0.0),
        "allreduce_start": HostCost(4e-5, 0.0), "allreduce_wait": HostCost(1e-5, 0.0)}

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")   # analytic costs


def test_overlap_is_the_busy_time_weighted_number_of_threads_busy():
    ov = overlap({"a": [(0.0, 4.0)], "b": [(2.0, 6.0), (3.0, 5.0)], "c": [(10.0, 11.0)]})
    assert ov["a"] == (4.0, pytest.approx(1.5))      # 2 s alone, 2 s beside b
    assert ov["b"] == (4.0, pytest.approx(1.5))      # its own overlap counts once
    assert ov["c"] == (1.0, pytest.approx(1.0))
    assert overlap({"idle": []})["idle"] == (0.0, 1.0)


def test_contention_is_runnable_threads_over_cores_at_least_one():
    assert contention_of_overlap(4, 0.0, 2) == 2.0    # 4 ranks computing on 2 cores
    assert contention_of_overlap(1, 0.5, 2) == 1.0    # a core to spare
    assert contention_of_overlap(2, 3.0, 2) == 2.5


def graph_on(model, strategy_fn, devices):
    net = load_app("rnnlm", ["--small"], devices)
    machine = model.taskrt_machine()
    lowered = lower(net.model, strategy_fn(net.model, list(range(devices))), machine,
                    net.optimizer)
    return plan(lowered.launches, machine, initial=lowered.initial)


def _run(ranks, spans, loads, wall=None):
    """A recorded run: node events (rank, start s, end s), per-rank (cpu s, wait s), each
    rank's load over `wall` seconds (default: the events' whole span)."""
    wall = wall if wall is not None else \
        max(e for _, _, e in spans) - min(s for _, s, _ in spans)
    events = [{"ph": "M", "pid": r, "name": LOAD_EVENT,
               "args": {"cpu_s": c, "wait_s": w, "wall_s": wall}}
              for r, (c, w) in loads.items()]
    events += [{"ph": "X", "pid": r, "ts": s * 1e6, "dur": (e - s) * 1e6, "args": {"node": 0}}
               for r, s, e in spans]
    return SimpleNamespace(ranks=ranks, events=events)


def test_background_is_cores_times_contention_minus_the_ranks_overlap():
    # two ranks that always work together on 2 cores, each at contention 2.5: 3 others
    together = _run(2, [(0, 0.0, 1.0), (1, 0.0, 1.0)], {0: (0.4, 0.6), 1: (0.4, 0.6)})
    assert background([together], 2) == pytest.approx(3.0)
    # one rank works while the other waits, at contention 1.5: 2 others
    turns = _run(2, [(0, 0.0, 1.0), (1, 1.0, 2.0)], {0: (0.5, 0.25), 1: (0.5, 0.25)})
    assert background([turns], 2) == pytest.approx(2.0)
    assert background([together, turns, turns], 2) == pytest.approx(2.0)   # the median
    assert background([_run(2, [(0, 0.0, 1.0)], {0: (1.0, 0.0)})], 2) is None  # a record missing
    # a rank that runs no node (operation parallelism on more ranks than operators) counts
    idle_rank = _run(2, [(0, 0.0, 1.0)], {0: (0.5, 0.25), 1: (0.001, 0.0)}, wall=1.0)
    assert background([idle_rank], 2) == pytest.approx(2.0, abs=1e-3)   # it woke 0.001 s


def _at(ranks, spans, contention):
    """A run whose every rank felt `contention` in its events and was asleep between them:
    1 s of events, 1 / contention s of CPU in them and the rest waiting."""
    return _run(ranks, spans, {r: (1.0 / contention, 1.0 - 1.0 / contention)
                               for r in range(ranks)})


def test_runs_where_nobody_waited_for_a_core_give_no_background():
    # a quiet machine: 2 ranks on 2 cores, contention 1 (no run-queue wait) whether the ranks
    # work at once or take turns; C - k (0 and 1) only bounds b, it does not measure it
    together = _at(2, [(0, 0.0, 1.0), (1, 0.0, 1.0)], 1.0)
    turns = _at(2, [(0, 0.0, 1.0), (1, 1.0, 2.0)], 1.0)
    assert sharing([turns, turns, together], 2) == (0.0, 0.0)
    assert background([turns, turns], 2) == 0.0          # C - k would say 1.0
    # a run above the floor is an estimate, those at the floor bound it
    loaded = _at(2, [(0, 0.0, 1.0), (1, 1.0, 2.0)], 1.5)  # 2 x 1.5 - 1 = 2 others
    assert background([loaded], 2) == pytest.approx(2.0)
    assert background([loaded, together], 2) == pytest.approx(0.0)   # at most 2 - 2


def _woken(ranks, spans, contention, cpu, wall):
    """A run whose ranks felt `contention` in their 1 s of events and, beyond them, woke for
    `cpu` s on a core (queueing for it at the same contention), over `wall` s."""
    c = contention
    return _run(ranks, spans, {r: (1.0 / c + cpu, 1.0 - 1.0 / c + cpu * (c - 1.0))
                               for r in range(ranks)}, wall=wall)


def test_waiting_ranks_share_of_a_core_is_the_cpu_they_took_beyond_their_events():
    # 4 ranks of 2 cores taking turns (1 s each of a 4 s iteration) at contention 1.5:
    # beyond its events each rank took 0.6 s of CPU and queued 0.3 s more for it: it was
    # runnable 0.3 of its 3 s of waits, but took a core 0.2 of them, what the worker lost
    turns = _woken(4, [(r, float(r), r + 1.0) for r in range(4)], 1.5, 0.6, 4.0)
    b, w = sharing([turns], 2)
    assert w == pytest.approx(0.2)
    # the OS's count C c - k = 2 x 1.5 - 1 = 2 is b + w (R - k) = b + 0.2 x 3
    assert b == pytest.approx(1.4)
    assert contention_of_overlap(1, b, 2, w, 4) == pytest.approx(1.5)
    # several runs: w the median of their shares, b the median of what it leaves, >= 0
    at_once = _woken(4, [(r, 0.0, 1.0) for r in range(4)], 2.0, 0.1, 2.0)        # w 0.1
    assert sharing([turns, at_once], 2) == (pytest.approx((2 - 0.45) / 2), pytest.approx(0.15))
    # a run at the floor bounds b: 2 x 1 - 2 - 0.2 x 2 < 0
    pairs = _woken(4, [(r, float(r // 2), r // 2 + 1.0) for r in range(4)], 1.0, 0.3, 2.0)
    assert sharing([turns, at_once, pairs], 2) == (0.0, pytest.approx(0.2))
    # a load record without its wall time determines nothing
    bare = _woken(4, [(r, float(r), r + 1.0) for r in range(4)], 1.5, 0.6, 4.0)
    del bare.events[0]["args"]["wall_s"]
    assert sharing([turns, bare], 2) is None


def test_ranks_working_at_once_are_slowed_more_than_ranks_taking_turns():
    m = cluster_model("four", CPU, 4).with_host_costs(HOST)
    costs = CostModel()
    data = graph_on(m, standard.STANDARD["data"], 4)            # all four compute at once
    c = per_thread_contention(data, m, costs, 0.0, 2)
    assert set(c) == PreemptedTimer(m, costs, 1.0, 0.0).threads
    assert all(v > 1.5 for v in c.values())
    # with no one else and a core each, nobody is slowed: the plain simulation
    alone = per_thread_contention(data, m, costs, 0.0, 4)
    assert all(v == 1.0 for v in alone.values())
    assert expected_makespan(data, m, costs, alone, 0.0) == pytest.approx(
        expected_makespan(data, m, costs, 1.0, 0.0), rel=1e-12)
    # a per-thread contention equal for every thread is the single number, bit for bit
    same = dict.fromkeys(c, 2.0)
    assert expected_makespan(data, m, costs, same, 1e-3, samples=4) == \
        expected_makespan(data, m, costs, 2.0, 1e-3, samples=4)


def test_a_calibration_of_several_ranks_says_when_it_fitted_no_per_rank_sharing():
    from dataclasses import replace
    from strategy.calibration import Fit
    plain = Fit({}, {}, {}, 0, 0, None)
    assert "no per-rank sharing fitted" in replace(plain, ranks=2).text()
    assert "no per-rank sharing fitted" not in plain.text()          # one rank: none to fit
    shared = replace(plain, ranks=4, background=0.9, waiting=0.21, cores=2).text()
    assert "no per-rank sharing fitted" not in shared and "0.21 of their waits" in shared
