"""Re-planning only the regions that changed launches touch gives exactly the graph a full
plan gives, after any sequence of configuration changes (the graph update of delta
simulation)."""
import random

import pytest

from parallel_ops import SGD, lower
from taskrt import Machine, Planner, plan

from mpi.models import cnn, lstm_model, mlp, random_strategy
from plan_checks import assert_same_plan, expanded


def changes(old, new):
    """Launches whose points changed, and regions whose initial data changed."""
    before = {l.name: l for l in old.launches}
    launches = [l for l in new.launches if expanded(l) != expanded(before[l.name])]
    old_init = {r.name: sorted(p, key=str) for r, p in old.initial.items()}
    initial = {r: p for r, p in new.initial.items()
               if sorted(p, key=str) != old_init.get(r.name)}
    return launches, initial


@pytest.mark.parametrize("build", [mlp, cnn, lstm_model], ids=["mlp", "cnn", "lstm"])
@pytest.mark.parametrize("devices", [2, 4])
def test_replan_equals_full_plan_after_random_changes(build, devices):
    model, _ = build()
    machine = Machine.grid(devices, 1)
    rng = random.Random(devices)
    strategy = random_strategy(model, devices, seed=1)
    low = lower(model, strategy, machine, SGD(lr=0.1))
    planner = Planner(machine, initial=low.initial)
    for launch in low.launches:
        planner.add_launch(launch)
    for step in range(8):
        op = rng.choice(model.ops)
        strategy = dict(strategy)
        strategy[op.name] = random_strategy(model, devices, seed=100 * step + devices)[op.name]
        new = lower(model, strategy, machine, SGD(lr=0.1))
        launches, initial = changes(low, new)
        touched = planner.replace(launches, initial)
        full = plan(new.launches, machine, initial=new.initial)
        assert_same_plan(planner.finish(), full, f"step {step}: {op.name}")
        if launches:
            assert touched and len(touched) < len(full.regions)
        low = new


def test_replace_of_an_unknown_launch_is_an_error():
    model, _ = mlp()
    machine = Machine.local(2)
    low = lower(model, {}, machine, SGD(lr=0.1))
    p = Planner(machine, initial=low.initial)
    for launch in low.launches[:3]:
        p.add_launch(launch)
    with pytest.raises(Exception, match="no launch named"):
        p.replace([low.launches[5]])


@pytest.mark.parametrize("build", [cnn, lstm_model], ids=["cnn", "lstm"])
def test_undo_gives_back_the_plan_before_the_replace(build):
    model, _ = build()
    machine = Machine.grid(4, 1)
    rng = random.Random(7)
    strategy = random_strategy(model, 4, seed=2)
    low = lower(model, strategy, machine, SGD(lr=0.1))
    planner = Planner(machine, initial=low.initial)
    for launch in low.launches:
        planner.add_launch(launch)
    graph = planner.finish()
    for step in range(6):
        op = rng.choice(model.ops)
        new_strategy = dict(strategy)
        new_strategy[op.name] = random_strategy(model, 4, seed=50 * step + 3)[op.name]
        new = lower(model, new_strategy, machine, SGD(lr=0.1))
        launches, initial = changes(low, new)
        planner.replace(launches, initial, record_undo=True)
        changed = planner.finish()
        planner.undo()
        again = planner.finish()
        assert again.fingerprint() == graph.fingerprint(), f"step {step}: {op.name}"
        assert again.instance_rects == graph.instance_rects
        assert again.final_valid == graph.final_valid
        if launches:
            assert changed.fingerprint() != graph.fingerprint()
        # The restored planner keeps working: the next replace matches a full plan.
        planner.replace(launches, initial)
        assert planner.finish().fingerprint() == \
            plan(new.launches, machine, initial=new.initial).fingerprint()
        strategy, low, graph = new_strategy, new, planner.finish()
    with pytest.raises(Exception, match="nothing to undo"):
        planner.undo()
