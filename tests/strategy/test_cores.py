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


def _run(ranks, spans, loads):
    """A recorded run: node events (rank, start s, end s), per-rank (cpu s, wait s)."""
    events = [{"ph": "M", "pid": r, "name": LOAD_EVENT, "args": {"cpu_s": c, "wait_s": w}}
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
    idle_rank = _run(2, [(0, 0.0, 1.0)], {0: (0.5, 0.25), 1: (0.001, 0.0)})
    assert background([idle_rank], 2) == pytest.approx(2.0)


def _at(ranks, spans, contention):
    """A run whose every rank felt `contention`: 1 s of CPU and (contention - 1) s waiting."""
    return _run(ranks, spans, {r: (1.0, contention - 1.0) for r in range(ranks)})


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


def test_waiting_ranks_runnable_share_is_fitted_from_runs_of_different_overlaps():
    # 4 ranks on 2 cores with b = 0.5 others, a waiting rank runnable 0.6 of its wait:
    # contention (k + 0.6 (4 - k) + 0.5) / 2 for k ranks working at once
    b, w = 0.5, 0.6
    def c(k):
        return (k + w * (4 - k) + b) / 2
    at_once = _at(4, [(r, 0.0, 1.0) for r in range(4)], c(4))
    turns = _at(4, [(r, float(r), r + 1.0) for r in range(4)], c(1))
    pairs = _at(4, [(r, float(r // 2), r // 2 + 1.0) for r in range(4)], c(2))
    fb, fw = sharing([at_once, turns, pairs], 2)
    assert (fb, fw) == (pytest.approx(b), pytest.approx(w))
    assert contention_of_overlap(1, fb, 2, fw, 4) == pytest.approx(c(1))
    assert contention_of_overlap(4, fb, 2, fw, 4) == pytest.approx(c(4))
    assert contention_of_overlap(1, fb, 2) == 1.0          # waiting ranks asleep: a core free


def test_a_negative_intercept_is_fitted_through_the_origin_not_cut_to_zero():
    # the fold of data, attribute parallel and random0 on 4 ranks (2026-12-04): no other
    # runnable threads, waiting ranks runnable 0.7 of their wait, and the ranks that all
    # work at once counted below k / C (y = C c - k = -0.4 at x = R - k = 0); the free line
    # through the three is about -0.4 + 0.83 x, and cut to 0 + 0.83 x it prices ranks that
    # take turns at (1 + 0.83 x 3) / 2 = 1.75 where they ran at 1.55
    w = 0.7
    at_once = _at(4, [(r, 0.0, 1.0) for r in range(4)], 1.8)
    turns = _at(4, [(r, float(r), r + 1.0) for r in range(4)], (1 + w * 3) / 2)
    pairs = _at(4, [(r, float(r // 2), r // 2 + 1.0) for r in range(4)], (2 + w * 2) / 2)
    fb, fw = sharing([at_once, turns, pairs], 2)
    assert (fb, fw) == (0.0, pytest.approx(w))
    assert contention_of_overlap(1, fb, 2, fw, 4) == pytest.approx(1.55)
    # a line whose free intercept is >= 0 keeps its slope (the test above)


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
