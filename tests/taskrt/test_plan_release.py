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


class _Watched:
    """The launches as a sequence whose iteration, after each launch is planned, records
    which regions still have a RegionPlanner (plan_once iterates it launch by launch)."""

    def __init__(self, launches, planner):
        self.launches, self.planner, self.live = launches, planner, []

    def __len__(self):
        return len(self.launches)

    def __getitem__(self, i):
        return self.launches[i]

    def __iter__(self):
        for launch in self.launches:
            yield launch
            self.live.append({n for n, rp in self.planner.planners.items() if rp is not None})


@pytest.mark.parametrize("build", [mlp, cnn], ids=["mlp", "cnn"])
def test_one_shot_plan_holds_a_region_only_between_its_first_and_last_launch(build):
    from taskrt.oneshot import plan_once
    model, _ = build()
    machine = Machine.grid(4, 1)
    low = lower(model, random_strategy(model, 4, seed=5), machine, SGD(lr=0.1))
    first, last = {}, {}
    for li, launch in enumerate(low.launches):
        for color in launch.colors:
            for req in launch.requirements(color):
                first.setdefault(req.region.name, li)
                last[req.region.name] = li
    planner = Planner(machine, initial=low.initial, replannable=False)
    watched = _Watched(low.launches, planner)
    plan_once(planner, watched)
    assert len(watched.live) == len(low.launches)
    for li, live in enumerate(watched.live):
        # Weights and their updates' state are initial data: not held before first use.
        assert all(first[n] <= li < last[n] for n in live), (li, live)
    assert max(map(len, watched.live)) < len(last)
    got = planner.finish(release=True)
    assert got.fingerprint() == full_graph(low, machine).fingerprint()
    assert list(got.final_valid) == list(full_graph(low, machine).final_valid)
