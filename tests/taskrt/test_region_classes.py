"""Regions planned alike, planned once (taskrt/regionclasses.py): the graph is node for node
the one planning every region gives, on models that repeat themselves under random strategies
(equal layers split alike, split with the same degrees on other devices, split otherwise), for
one-shot plans (plan()), for planners that re-plan (add_launches, then replace and undo), and
for a launch added after add_launches that touches a region planned with others."""
import random
import warnings

import pytest

from parallel_ops import SGD, Model, ParallelConfig, lower
from taskrt import Machine, Planner, plan
from taskrt.regionclasses import RegionClasses
from taskrt.regionmemo import RegionPlanMemo

from plan_checks import replace_strategy
from test_graph_golden import digest

warnings.simplefilter("ignore")

DEVICES = 4


def tower(layers: int = 6, width: int = 8, batch: int = 8) -> Model:
    """`layers` equal linear layers: their weights, activations and gradients are alike."""
    m = Model("tower", seed=0, dtype="float64")
    h = m.input("x", (batch, width), requires_grad=True)
    y = m.input("y", (batch,), dtype="int64")
    for i in range(layers):
        h = m.relu(m.linear(h, width, name=f"fc{i}"), name=f"act{i}")
    m.softmax_cross_entropy(m.linear(h, 5, name="head"), y, name="loss")
    return m


def alike_strategy(model: Model, seed: int) -> dict:
    """Per operator one of few configs, so that equal layers often get the same one: data
    parallel, split by samples on devices 0-1 or on 2-3 (same degrees, other devices: only a
    key naming devices tells them apart), split by output features, or none given."""
    rng = random.Random(seed)
    options = [None, ParallelConfig.of([0, 1], n=2), ParallelConfig.of([2, 3], n=2),
               ParallelConfig.of([0, 1, 2, 3], n=4)]
    out = {}
    for op in model.ops:
        pick = rng.choice(options + ([ParallelConfig.of([1, 3], o=2)]
                                     if op.name.startswith("fc") else []))
        if pick is not None:
            out[op.name] = pick
    return out


def plan_region_by_region(launches, machine, initial):
    """The oracle: every region planned on its own, launch by launch (add_launch)."""
    p = Planner(machine, initial, memo=RegionPlanMemo(0), replannable=False)
    for launch in launches:
        p.add_launch(launch)
    return p.finish(release=True)


def classes_of(launches, machine, initial) -> RegionClasses:
    p = Planner(machine, initial, memo=RegionPlanMemo(0), replannable=False)
    expanded = [p._expand(launch) for launch in launches]
    return RegionClasses.find(p, launches, expanded, 0)


@pytest.mark.parametrize("seed", range(12))
def test_one_shot_plan_equals_planning_every_region(seed):
    model, machine = tower(), Machine.grid(DEVICES, 1)
    low = lower(model, alike_strategy(model, seed), machine, SGD(lr=0.1, momentum=0.9))
    assert len(classes_of(low.launches, machine, low.initial)) > 0      # (not vacuous)
    got = plan(low.launches, machine, initial=low.initial)
    assert digest(got) == digest(plan_region_by_region(low.launches, machine, low.initial))


def last_use_walk(launches, base: int = 0) -> dict:
    """The oracle of RegionClasses.last_use: every point's requirements walked in order,
    each region's last launch (planner index), regions in the order first named."""
    out: dict[str, int] = {}
    for i, launch in enumerate(launches):
        for color in launch.colors:
            for req in launch.requirements(color):
                out[req.region.name] = base + i
    return out


@pytest.mark.parametrize("seed", range(6))
def test_last_use_is_the_walks(seed):
    """plan_once retires each region after RegionClasses.last_use's launch: the walk's, in
    the walk's order (regions retired in it), for launches added after others too."""
    from mpi.models import cnn, mlp, random_strategy
    for model in (tower(), mlp()[0], cnn()[0]):
        machine = Machine.grid(DEVICES, 1)
        strategy = alike_strategy(model, seed) if model.name == "tower" else \
            random_strategy(model, DEVICES, seed=seed)
        low = lower(model, strategy, machine, SGD(lr=0.1))
        launches = low.launches
        got = classes_of(launches, machine, low.initial).last_use
        assert list(got.items()) == list(last_use_walk(launches).items()), model.name
        cut = len(launches) // 3                    # (a planner holding launches before)
        p = Planner(machine, low.initial, replannable=False)
        for launch in launches[:cut]:
            p.add_launch(launch)
        expanded = [p._expand(launch) for launch in launches[cut:]]
        got = RegionClasses.find(p, launches[cut:], expanded, cut).last_use
        assert list(got.items()) == list(last_use_walk(launches[cut:], cut).items())


def test_replannable_planner_equals_planning_every_region():
    """add_launches (as SimulationSession builds), then random strategies swapped in and
    undone: each graph equals a plan of that strategy made region by region."""
    model, machine = tower(), Machine.grid(DEVICES, 1)
    low = lower(model, alike_strategy(model, 0), machine, SGD(lr=0.1))
    p = Planner(machine, initial=low.initial)
    p.add_launches(low.launches)
    assert digest(p.finish()) == digest(plan_region_by_region(low.launches, machine,
                                                              low.initial))
    for seed in range(1, 6):
        new = replace_strategy(p, model, alike_strategy(model, seed), machine)
        assert digest(p.finish()) == digest(plan_region_by_region(new.launches, machine,
                                                                  new.initial)), seed
        if seed % 2:
            p.undo()
    last = lower(model, alike_strategy(model, 4), machine, SGD(lr=0.1))    # (5 undone)
    assert digest(p.finish()) == digest(plan_region_by_region(last.launches, machine,
                                                              last.initial))


def test_remembered_plans_moved_to_regions_alike():
    """A search changes one layer at a time: the plan a region got under a config is taken,
    moved, by another layer's region under the same config (RegionPlanMemo.moved), and the
    graph equals a plan made region by region after each change and undo."""
    model, machine = tower(), Machine.grid(DEVICES, 1)
    rng = random.Random(3)
    options = [ParallelConfig.of([0, 1], n=2), ParallelConfig.of([2, 3], n=2),
               ParallelConfig.of([1, 3], o=2)]
    strategy = {}
    low = lower(model, strategy, machine, SGD(lr=0.1))
    p = Planner(machine, initial=low.initial)
    p.add_launches(low.launches)
    for step in range(30):
        trial = dict(strategy)
        trial[f"fc{rng.randrange(6)}"] = rng.choice(options)
        new = replace_strategy(p, model, trial, machine)
        assert digest(p.finish()) == digest(plan_region_by_region(new.launches, machine,
                                                                  new.initial)), step
        if rng.random() < 0.5:
            p.undo()
        else:
            strategy = trial
    assert p.memo.moved > 0                                            # (not vacuous)
    last = lower(model, strategy, machine, SGD(lr=0.1))
    assert digest(p.finish()) == digest(plan_region_by_region(last.launches, machine,
                                                              last.initial))


def test_a_later_launch_on_a_shared_region_plans_it_on_its_own():
    """A launch added after add_launches that touches a region planned with others: that
    region is planned again alone first, the others keep theirs."""
    model, machine = tower(), Machine.grid(DEVICES, 1)
    low = lower(model, {}, machine, SGD(lr=0.1))
    head, tail = low.launches[:-3], low.launches[-3:]
    p = Planner(machine, initial=low.initial)
    p.add_launches(head)
    assert p._frozen                                                   # (not vacuous)
    for launch in tail:
        p.add_launch(launch)
    assert digest(p.finish()) == digest(plan_region_by_region(low.launches, machine,
                                                              low.initial))
