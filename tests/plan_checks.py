"""Checks shared by the tests of re-planning (tests/test_incremental_plan.py,
tests/taskrt/test_region_memo.py, test_plan_versions.py): what a launch asks for, a planner
of a strategy and a config change replaced in it, and a re-planned graph against a full plan
of the same launches."""
from parallel_ops import SGD, lower
from taskrt import Planner


def expanded(launch):
    """What a launch asks for, comparable across lowerings."""
    return (tuple(launch.devices or ()),
            tuple(tuple((r.region.name, r.rect, r.privilege) for r in launch.requirements(c))
                  for c in launch.colors))


def planner_of(model, strategy, machine) -> Planner:
    """A Planner with one iteration of `model` under `strategy` (SGD) added."""
    low = lower(model, strategy, machine, SGD(lr=0.1))
    planner = Planner(machine, initial=low.initial)
    for launch in low.launches:
        planner.add_launch(launch)
    return planner


def replace_strategy(planner, model, strategy, machine):
    """Replace (undo recorded) the launches that ask otherwise under `strategy`; returns
    its lowering."""
    new = lower(model, strategy, machine, SGD(lr=0.1))
    replaced = [l for l in new.launches
                if expanded(l) != expanded(planner.plans[planner.index[l.name]].launch)]
    planner.replace(replaced, new.initial, record_undo=True)
    return new


def assert_same_plan(got, full, where: str) -> None:
    """The graph a planner gave after replace() equals a full plan's: nodes and edges
    (fingerprint), each buffer's rect, and the valid pieces at the end."""
    assert got.fingerprint() == full.fingerprint(), where
    assert got.instance_rects == full.instance_rects, where
    assert got.final_valid == full.final_valid, where
