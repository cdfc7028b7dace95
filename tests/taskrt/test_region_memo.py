"""Region plans taken back from the memo (taskrt/regionmemo.py) give exactly the graph, and
the simulation, that planning from scratch gives, when a search keeps coming back to the same
configs: each operator here moves among three configs only (the same degrees on other
devices among them, which only a key naming devices tells apart), with undos between."""
import random
import warnings

import numpy as np
import pytest

from parallel_ops import SGD, lower
from strategy.costs import CostModel
from strategy.delta import SimulationSession
from strategy.machine_model import machine_model
from taskrt import Machine, Planner, plan
from taskrt.regionmemo import RegionPlan, RegionPlanMemo

from mpi.models import cnn, lstm_model, mlp, random_strategy
from plan_checks import assert_same_plan, expanded, planner_of, replace_strategy

warnings.simplefilter("ignore")       # analytic-cost fallback warnings


def few_configs(model, devices: int):
    """Per operator three configs: two random ones and the first's degrees on the devices
    shifted by one."""
    out = {}
    a, b = random_strategy(model, devices, 5), random_strategy(model, devices, 6)
    for op in model.ops:
        first = a[op.name]
        moved = type(first)(first.degrees, tuple((d + 1) % devices for d in first.devices))
        out[op.name] = [first, b[op.name], moved]
    return out


def proposals(model, devices: int, count: int, seed: int):
    rng = random.Random(seed)
    options = few_configs(model, devices)
    for _ in range(count):
        op = rng.choice(model.ops)
        yield op.name, rng.choice(options[op.name]), rng.random() < 0.5


@pytest.mark.parametrize("build", [mlp, cnn, lstm_model], ids=["mlp", "cnn", "lstm"])
def test_remembered_region_plans_equal_a_full_plan(build):
    model, _ = build()
    machine = Machine.grid(4, 1)
    strategy = random_strategy(model, 4, seed=1)
    planner = planner_of(model, strategy, machine)
    for step, (name, cfg, keep) in enumerate(proposals(model, 4, 40, seed=3)):
        trial = dict(strategy, **{name: cfg})
        new = replace_strategy(planner, model, trial, machine)
        assert_same_plan(planner.finish(), plan(new.launches, machine, initial=new.initial),
                         f"step {step}: {name} -> {cfg}")
        if keep:
            strategy = trial
        else:
            planner.undo()
    assert planner.memo.hits > 10, "the sequence should come back to remembered plans"


@pytest.mark.parametrize("build", [cnn, lstm_model], ids=["cnn", "lstm"])
def test_delta_with_remembered_plans_equals_full_simulation(build):
    model, _ = build()
    mm = machine_model("p100:1")
    strategy = random_strategy(model, 4, seed=2)
    session = SimulationSession(model, mm, CostModel(), dict(strategy))
    for step, (name, cfg, keep) in enumerate(proposals(model, 4, 30, seed=4)):
        got = session.change(name, cfg)
        fresh = SimulationSession(model, mm, CostModel(), dict(strategy, **{name: cfg}))
        assert session.graph.fingerprint() == fresh.graph.fingerprint(), f"step {step}"
        assert got.makespan == fresh.result.makespan, f"step {step}: {name}"
        assert np.array_equal(got.start, fresh.result.start)
        assert got.memory == fresh.result.memory
        if keep:
            strategy[name] = cfg
        else:
            session.undo()
    assert session.planner.memo.hits > 10


def test_memo_empties_itself_at_its_bound_and_can_be_off():
    memo = RegionPlanMemo(max_nodes=5)
    plan_of = lambda size: RegionPlan(None, [], [], size)
    assert not memo.put("a", plan_of(3))
    assert memo.put("b", plan_of(3))            # 6 > 5: emptied first
    assert memo.get("a") is None and memo.get("b") is not None and len(memo) == 1
    off = RegionPlanMemo(max_nodes=0)
    off.put("a", plan_of(1))
    assert off.get("a") is None
    with pytest.raises(ValueError, match="max_nodes"):
        RegionPlanMemo(max_nodes=-1)


def test_plans_that_made_no_node_count_toward_the_bound():
    # a region whose launches need no copy plans no node but its plan holds planner state:
    # a table of only such plans must still be bounded
    memo = RegionPlanMemo(max_nodes=3)
    emptied = [memo.put(f"k{i}", RegionPlan(None, [], [], 0)) for i in range(4)]
    assert emptied == [False, False, False, True] and len(memo) == 1 and memo.nodes == 1
    memo.put("k3", RegionPlan(None, [], [], 0))       # the same key again: no growth
    assert len(memo) == 1 and memo.nodes == 1


def test_the_memo_size_comes_from_the_settings(monkeypatch):
    machine = Machine.grid(2, 1)
    monkeypatch.setenv("TASKRT_PLAN_MEMO_NODES", "0")
    assert Planner(machine).memo.max_nodes == 0
    monkeypatch.setenv("TASKRT_PLAN_MEMO_NODES", "1000")
    assert Planner(machine).memo.max_nodes == 1000
    monkeypatch.setenv("TASKRT_PLAN_MEMO_NODES", "lots")
    with pytest.raises(Exception, match="TASKRT_PLAN_MEMO_NODES"):
        Planner(machine)


def test_without_a_memo_the_planner_keeps_no_groups_of_old_plans():
    """Off, nothing is remembered: no read groups are kept past their plan (a planner kept
    every read group it ever built, a leak over a long search), and plans still equal."""
    model, _ = mlp()
    machine = Machine.grid(4, 1)
    strategy = random_strategy(model, 4, seed=1)
    low = lower(model, strategy, machine, SGD(lr=0.1))
    planner = Planner(machine, initial=low.initial, memo=RegionPlanMemo(0))
    for launch in low.launches:
        planner.add_launch(launch)
    for step, (name, cfg, _) in enumerate(proposals(model, 4, 10, seed=3)):
        strategy = dict(strategy, **{name: cfg})
        new = lower(model, strategy, machine, SGD(lr=0.1))
        planner.replace([l for l in new.launches if expanded(l) !=
                         expanded(planner.plans[planner.index[l.name]].launch)], new.initial)
        assert_same_plan(planner.finish(), plan(new.launches, machine, initial=new.initial),
                         f"step {step}")
    assert planner.memo.hits == 0 and planner.num_remembered_groups == 0


@pytest.mark.parametrize("seed", range(6))
def test_regions_asked_alike_under_other_requirements_share_one_plan(seed):
    """An LSTM's bias_ih and bias_hh (and layer 1's weight_ih and weight_hh, with their
    gradients and momenta) are asked alike by the same launches, under other requirement
    indices: a replace plans one and moves its plan to the other (region_key holds no
    requirement index; the two then share the RegionPlanner), and the graph is a full
    plan's, Red+ targets and end state included."""
    from test_graph_golden import digest
    model, _ = lstm_model()
    machine = Machine.grid(4, 1)
    strategy = random_strategy(model, 4, seed=seed)
    planner = planner_of(model, strategy, machine)
    rng = random.Random(seed)
    changed = 0
    for step in range(4):
        name = rng.choice(["lstm_l0", "lstm_l1"])
        trial = dict(strategy, **{name: random_strategy(model, 4, 100 * seed + step)[name]})
        new = replace_strategy(planner, model, trial, machine)
        if trial[name] != strategy[name]:
            changed += 1
            pairs = [("bias_ih", "bias_hh"), ("bias_ih@grad", "bias_hh@grad")] + \
                ([("weight_ih", "weight_hh")] if name == "lstm_l1" else [])
            for a, b in pairs:
                assert planner.planners[f"{name}.{a}"] is planner.planners[f"{name}.{b}"], \
                    f"step {step}: {name} -> {trial[name]}: {a} and {b} planned apart"
        full = plan(new.launches, machine, initial=new.initial)
        assert digest(planner.finish()) == digest(full), f"step {step}: {name}"
        strategy = trial
    assert changed, "no step changed a config"
