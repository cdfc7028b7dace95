"""plan() builds with a one-shot planner (no re-planning log, no memo, its state dropped
before the graph's edge lists are made): the graph must be the one a re-plannable planner
gives, and such a planner must refuse replace() with a clear error."""
import pytest

from parallel_ops import SGD, lower
from taskrt import Machine, Planner, plan
from taskrt.errors import PlanError

from mpi.models import cnn, mlp, random_strategy


def full_graph(low, machine):
    planner = Planner(machine, initial=low.initial)
    for launch in low.launches:
        planner.add_launch(launch)
    return planner.finish()


@pytest.mark.parametrize("build", [mlp, cnn], ids=["mlp", "cnn"])
@pytest.mark.parametrize("devices", [2, 4])
def test_one_shot_plan_equals_replannable_planner(build, devices):
    model, _ = build()
    machine = Machine.grid(devices, 1)
    low = lower(model, random_strategy(model, devices, seed=3), machine, SGD(lr=0.1))
    got, want = plan(low.launches, machine, initial=low.initial), full_graph(low, machine)
    assert got.fingerprint() == want.fingerprint()
    assert got.preds == want.preds and got.succs == want.succs
    assert got.launch_nodes == want.launch_nodes
    # The region facts finish() reads from the region planners before dropping them.
    assert got.instance_rects == want.instance_rects and got.instance_rects
    assert got.partial_rects == want.partial_rects
    assert got.initial_valid == want.initial_valid and got.initial_valid
    assert got.final_valid == want.final_valid
    assert got.final_pending == want.final_pending


def test_one_shot_planner_refuses_replace():
    model, _ = mlp()
    machine = Machine.grid(2, 1)
    low = lower(model, {}, machine, SGD(lr=0.1))
    planner = Planner(machine, initial=low.initial, replannable=False)
    for launch in low.launches:
        planner.add_launch(launch)
    assert not planner.log
    with pytest.raises(PlanError, match="replannable=False.*replannable=True"):
        planner.replace(low.launches[:1])
