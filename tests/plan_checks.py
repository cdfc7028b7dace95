"""Checks shared by the tests of re-planning (tests/test_incremental_plan.py,
tests/taskrt/test_region_memo.py): what a launch asks for, and a re-planned graph against a
full plan of the same launches."""


def expanded(launch):
    """What a launch asks for, comparable across lowerings."""
    return (tuple(launch.devices or ()),
            tuple(tuple((r.region.name, r.rect, r.privilege) for r in launch.requirements(c))
                  for c in launch.colors))


def assert_same_plan(got, full, where: str) -> None:
    """The graph a planner gave after replace() equals a full plan's: nodes and edges
    (fingerprint), each buffer's rect, and the valid pieces at the end."""
    assert got.fingerprint() == full.fingerprint(), where
    assert got.instance_rects == full.instance_rects, where
    assert got.final_valid == full.final_valid, where
