"""Preemption on a shared machine (strategy/preemption.py): one process pays the contention
in proportion to its work; ranks that exchange data pay more, since a slice taken from one
stalls the other at the next exchange."""
import random

import pytest

from parallel_ops.lowering import lower
from strategy import standard
from strategy.costs import CostModel
from strategy.costs.app_profile import load_app
from strategy.logical_devices import shared
from strategy.machines import cluster_model
from strategy.machines.specs import DeviceSpec, HostCost
from strategy.preemption import PreemptedTimer, expected_makespan
from strategy.simulator import simulate
from taskrt import plan

CPU = DeviceSpec("cpu", 1e10, 1e9, 5e10, 1e10, 1 << 34, 5e-6)
HOST = {"task": HostCost(2e-5, 0.0), "copy": HostCost(3e-5, 0.0), "send": HostCost(5e-5, 0.0),
        "recv": HostCost(4e-5, 0.0), "reduce": HostCost(3e-5, 0.0),
        "allreduce_start": HostCost(4e-5, 0.0), "allreduce_wait": HostCost(1e-5, 0.0)}

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")   # analytic costs


def graph_on(model, strategy_fn, devices=2):
    net = load_app("rnnlm", ["--small"], devices)
    machine = model.taskrt_machine()
    lowered = lower(net.model, strategy_fn(net.model, list(range(devices))), machine,
                    net.optimizer)
    return plan(lowered.launches, machine, initial=lowered.initial)


def test_one_process_pays_contention_in_proportion_to_its_work():
    m = shared(cluster_model("one", CPU, 1).with_host_costs(HOST), 2)
    g = graph_on(m, standard.STANDARD["data"])
    costs = CostModel()
    plain = simulate(g, m, costs).makespan
    # the smooth limit: every node on the thread takes 2.5x
    assert expected_makespan(g, m, costs, 2.5, 0.0) == pytest.approx(2.5 * plain, rel=1e-9)
    # slices: the same on average (the thread runs everything one after another)
    assert expected_makespan(g, m, costs, 2.5, 1e-3, samples=64) == \
        pytest.approx(2.5 * plain, rel=0.1)
    assert expected_makespan(g, m, costs, 1.0, 5e-3) == pytest.approx(plain, rel=1e-12)


def test_slices_taken_from_one_rank_stall_the_other():
    m = cluster_model("two", CPU, 2).with_host_costs(HOST)
    g = graph_on(m, standard.STANDARD["attribute"])        # halo exchanges every step
    costs = CostModel()
    smooth = expected_makespan(g, m, costs, 2.0, 0.0)
    sliced = expected_makespan(g, m, costs, 2.0, 5e-3, samples=32)
    assert sliced > 1.1 * smooth


def test_a_thread_loses_contention_minus_one_seconds_per_second_on_average():
    m = cluster_model("one", CPU, 1)
    t = PreemptedTimer(m, CostModel(), 3.0, 4e-3, random.Random(1))
    draws = [t.stalled(1e-3) for _ in range(20000)]
    assert sum(draws) / len(draws) == pytest.approx(3e-3, rel=0.05)
    assert set(round(d * 1e6) for d in draws) == {1000, 5000}     # whole slices
    assert t.stalled(0.0) == 0.0
    with pytest.raises(ValueError, match="contention"):
        PreemptedTimer(m, CostModel(), 0.5, 4e-3)


def test_coupled_ranks_wait_for_the_slower_rank_of_each_draw():
    """Ranks drawn at one recorded iteration's speeds (0.8x and 1.2x their tasks' prices,
    in either order) take the slower rank's time where they are coupled: the mean makespan
    is above the one at every key's price (the median's), and equals the draw's simulation
    in each order. Speeds of 1 change nothing."""
    from strategy.preemption import draw_speeds
    from strategy.simulator import NodeTimer
    m = cluster_model("two", CPU, 2).with_host_costs(HOST)
    g = graph_on(m, standard.STANDARD["data"])
    costs = CostModel()
    plain = expected_makespan(g, m, costs, 1.0, 0.0)
    assert expected_makespan(g, m, costs, 1.0, 0.0, speeds=[(1.0, 1.0)]) == \
        pytest.approx(plain, rel=1e-12)
    threads = sorted({NodeTimer(m, costs).host(d) for d in range(2)}, key=repr)
    each = [simulate(g, m, costs, PreemptedTimer(m, costs, 1.0, 0.0, speed=dict(
        zip(threads, order)))).makespan for order in ((0.8, 1.2), (1.2, 0.8))]
    drawn = expected_makespan(g, m, costs, 1.0, 0.0, speeds=[(0.8, 1.2)], samples=8)
    assert min(each) <= drawn <= max(each) and drawn > 1.1 * plain
    # a draw gives every thread one of the tuple's speeds, a thread beyond it 1
    d = draw_speeds([(0.8, 1.2)], threads + ["third"], random.Random(3))
    assert sorted(d.values()) == [0.8, 1.0, 1.2] and d["third"] == 1.0


def test_rank_speeds_are_each_ranks_task_time_over_the_iterations():
    """A recorded iteration whose rank 0 ran its tasks at 0.9x their prices and rank 1 at
    1.5x (a shared 1.2x: the iteration's, the contention's and the factor's to hold) gives
    (0.75, 1.25); a run with one rank's tasks gives nothing to draw."""
    from types import SimpleNamespace
    from strategy.costs import Measurement, Profile
    from strategy.insitu import rank_speeds
    m = cluster_model("two", CPU, 2).with_host_costs(HOST)
    g = graph_on(m, standard.STANDARD["data"])
    prof, events = Profile(), []
    tasks = [n for n in g.nodes if n.kind == "task"]
    for n in tasks:
        prof.add(n.cost_key, "cpu", Measurement(1e-4, 1, 1e-4, 1e-4))
        events.append({"ph": "X", "pid": n.device, "ts": 0, "dur": 100 * (0.9, 1.5)[n.device],
                       "args": {"node": n.id}})
    run = SimpleNamespace(ranks=2, graph=g, events=events)
    (got,) = rank_speeds([run], prof)
    n0 = sum(n.device == 0 for n in tasks)
    shared = (0.9 * n0 + 1.5 * (len(tasks) - n0)) / len(tasks)     # 1.2 with equal counts
    assert got == pytest.approx((0.9 / shared, 1.5 / shared), rel=1e-9)
    assert got == pytest.approx((0.75, 1.25), rel=0.01)
    one = SimpleNamespace(ranks=2, graph=g, events=[e for e in events if e["pid"] == 0])
    assert rank_speeds([one], prof) == []
