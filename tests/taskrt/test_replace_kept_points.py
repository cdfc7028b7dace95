"""Planner.replace keeps a launch object's expanded points, interference check and grouping
by region (taskrt/replanning.py `_expanded`): a search hands it the same launch objects again.
Replacing back and forth with the same objects, with undos between, gives exactly the graph a
full plan gives, and the regions a kept launch names are known again, in the order expand()
makes them known, after an undo took away the regions its first replace declared."""
import random
import warnings

import pytest

from parallel_ops import SGD, lower
from taskrt import WD, R, RW, IndexLaunch, Machine, Planner, Rect, Region, RegionRequirement, plan

from mpi.models import cnn, lstm_model, random_strategy
from plan_checks import assert_same_plan, expanded

warnings.simplefilter("ignore")


def _task(ctx):          # never run: the tests only plan
    pass


def _launch(name, reqs_of, domain=(2,), devices=(0, 1)):
    return IndexLaunch(name, _task, domain, reqs_of, devices=devices)


def test_a_kept_launch_declares_its_regions_again_after_an_undo():
    machine = Machine.local(2)
    x, y, z, w = Region("x", (8,)), Region("y", (8,)), Region("z", (8,)), Region("w", (8,))
    half = lambda c: Rect((4 * c[0],), (4 * c[0] + 4,))           # noqa: E731
    initial = {x: [(Rect((0,), (8,)), 0)]}
    a = _launch("f", lambda c: [RegionRequirement(x, half(c), R),
                                RegionRequirement(y, half(c), WD)])
    # The other config of "f" also writes two regions no launch named before, z then w.
    b = _launch("f", lambda c: [RegionRequirement(x, half(c), R),
                                RegionRequirement(w if c[0] else z, half(c), WD),
                                RegionRequirement(y, half(c), WD)])
    g = _launch("g", lambda c: [RegionRequirement(y, Rect((0,), (8,)), R),
                                RegionRequirement(x, half(c), RW)])
    planner = Planner(machine, initial=initial)
    for launch in (a, g):
        planner.add_launch(launch)
    for step in range(3):
        planner.replace([b], record_undo=True)
        # (as expand() declares them: in the order the points name them)
        assert list(planner.regions) == ["x", "y", "z", "w"], f"step {step}"
        assert_same_plan(planner.finish(), plan([b, g], machine, initial=initial),
                         f"step {step}: b")
        planner.undo()          # z and w are declared by the replace: undone with it
        assert list(planner.regions) == ["x", "y"], f"step {step}"
        assert_same_plan(planner.finish(), plan([a, g], machine, initial=initial),
                         f"step {step}: undone")


@pytest.mark.parametrize("build", [cnn, lstm_model], ids=["cnn", "lstm"])
def test_the_same_launch_objects_again_give_a_full_plan_s_graph(build):
    """Each operator moves among three configs, lowered once each, so that a replace gets
    the launch objects it was given before (as from IncrementalLowering); undos between."""
    model, _ = build()
    machine = Machine.grid(4, 1)
    rng = random.Random(11)
    configs = {op.name: [random_strategy(model, 4, seed)[op.name] for seed in (1, 2, 3)]
               for op in model.ops}
    lowered: dict = {}

    def lowering(strategy):
        key = tuple(sorted((name, str(cfg)) for name, cfg in strategy.items()))
        if key not in lowered:
            lowered[key] = lower(model, strategy, machine, SGD(lr=0.1))
        return lowered[key]

    strategy = {name: options[0] for name, options in configs.items()}
    low = lowering(strategy)
    planner = Planner(machine, initial=low.initial)
    for launch in low.launches:
        planner.add_launch(launch)
    reused, given = 0, set()          # (the lowerings keep the launches given alive)
    for step in range(40):
        op = rng.choice(model.ops)
        trial = dict(strategy, **{op.name: rng.choice(configs[op.name])})
        new = lowering(trial)
        current = {lp.launch.name: lp.launch for lp in planner.plans}
        launches = [l for l in new.launches if l is not current[l.name]
                    and expanded(l) != expanded(current[l.name])]
        reused += sum(id(l) in given for l in launches)
        given.update(map(id, launches))
        planner.replace(launches, new.initial, record_undo=True)
        assert_same_plan(planner.finish(), plan(new.launches, machine, initial=new.initial),
                         f"step {step}: {op.name}")
        if rng.random() < 0.5:
            planner.undo()
            assert_same_plan(planner.finish(), plan(low.launches, machine,
                                                    initial=low.initial),
                             f"step {step}: undo of {op.name}")
        else:
            strategy, low = trial, new
    assert reused >= 10, "the sequence should give replace launch objects it was given before"
