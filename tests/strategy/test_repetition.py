"""A rank's speed from its repetition (strategy/repetition.py): the slope fitted from runs,
its guard, the keys priced at the runs' centre and a predicted thread's tasks scaled back."""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from strategy.insitu import work_durations
from strategy.preemption import expected_makespan
from strategy.repetition import repetition, run_scale, stable_slope, thread_scale
from strategy.costs import Measurement
from strategy.simulator import NodeTimer
from taskrt.taskgraph import TASK

sys.path.insert(0, str(Path(__file__).parent))
from sim_graphs import HandGraph  # noqa: E402
from test_wakeups import cpu_lab  # noqa: E402

B = -0.3


class Graph(SimpleNamespace):
    def fingerprint(self):
        return self.name


def run_of(name, per_rank_keys, b=B, app="app"):
    """A recorded run of 2 ranks: rank r runs per_rank_keys[r] = [(key, count)], each task
    event 1 ms x (its key's weight) x (the rank's repetition)^b."""
    nodes, events = [], []
    for rank, keys in enumerate(per_rank_keys):
        rep = sum(c for _, c in keys) / len(keys)
        for key, count in keys:
            for _ in range(count):
                n = SimpleNamespace(id=len(nodes), kind=TASK, device=rank, cost_key=key)
                nodes.append(n)
                dur = 1000.0 * (1 + len(key)) * rep ** b
                events.append({"ph": "X", "pid": rank, "dur": dur, "args": {"node": n.id}})
    return SimpleNamespace(app=app, graph=Graph(name=name, nodes=nodes), events=events,
                           ranks=2, per_rank=1, executor_s={}, task_scale={})


def runs_of(b=B, odd=None):
    out = []
    for i, (c0, c1) in enumerate([(1, 4), (2, 6), (3, 1), (5, 2), (8, 3)]):
        out.append(run_of(f"s{i}", [[("a", c0), ("bb", c0)], [("a", c1), ("ccc", c1)]],
                          b=odd if odd is not None and i == 0 else b))
    return out


def test_repetition_is_tasks_per_distinct_key_per_rank():
    r = run_of("x", [[("a", 4), ("bb", 2)], [("a", 1)]])
    assert repetition(r.graph, 1) == {0: 3.0, 1: 1.0}


def test_a_planted_slope_is_found_and_undone_when_keys_are_priced():
    runs = runs_of()
    b, ref = stable_slope(runs)
    assert b == pytest.approx(B, abs=1e-9)
    durations: dict = {}
    for r in runs:
        r.task_scale = run_scale(r.graph, r.per_rank, b, ref)
        work_durations(r, durations)
    # every event of a key, whatever its rank's repetition, is priced at the centre ref
    for key, ds in durations.items():
        assert max(ds) == pytest.approx(min(ds), rel=1e-9)
        assert ds[0] == pytest.approx(1e-3 * (1 + len(key)) * ref ** B, rel=1e-9)
    # and a thread repeating its work 6 times runs it at ref's price x (6 / ref)^b
    g = run_of("new", [[("a", 6)], [("a", 2), ("bb", 2)]]).graph
    scale = thread_scale(g, 1, b, ref, lambda d: f"t{d}")
    assert scale["t0"] * durations["a"][0] == pytest.approx(2e-3 * 6 ** B, rel=1e-9)
    assert scale == {"t0": pytest.approx((6 / ref) ** B), "t1": pytest.approx((2 / ref) ** B)}


def test_a_slope_the_runs_do_not_agree_on_is_not_used():
    assert stable_slope(runs_of(odd=0.6))[0] == pytest.approx(B, abs=0.02)  # near: kept
    assert stable_slope(runs_of(odd=2.0))[0] == 0.0   # one graph far off: 0.04-0.41 apart
    assert stable_slope(runs_of(b=0.0))[0] == pytest.approx(0.0, abs=1e-12)
    one = runs_of()
    for r in one:
        r.ranks = 1                                     # one process: no slope
    assert stable_slope(one)[0] == 0.0


def test_a_threads_scale_multiplies_its_tasks_in_the_simulation():
    m = cpu_lab()                         # CPU devices: a rank's thread runs its tasks
    h = HandGraph(m)
    a = h.task("a", 0, 1e-3)
    c = h.copy(h.region("x", 250), 0, 1, preds=[a])
    b = h.task("b", 1, 2e-3, preds=[c])
    for i, t in ((a, 1e-3), (b, 2e-3)):
        h.profile.add(h.graph.nodes[i].cost_key, "cpu", Measurement(t))
    costs = h.costs()
    host = NodeTimer(m, costs).host
    base = expected_makespan(h.graph, m, costs, 1.0, 0.0)
    for speeds in (None, [(1.0, 1.0)]):               # with and without the ranks' spread
        slower = expected_makespan(h.graph, m, costs, 1.0, 0.0, speeds=speeds,
                                   scale={host(0): 1.0, host(1): 1.5})
        assert slower == pytest.approx(base + 1e-3, rel=1e-9)    # b's 2 ms at 1.5x
