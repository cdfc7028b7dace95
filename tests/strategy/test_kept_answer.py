"""SimulationSession._kept_regions gives its last answer again while nothing it reads
changed (the counts of regions read by writing tasks, the planner's regions, the regions
with initial data): equal to the answer computed afresh after any change and undo, and
a new answer as soon as the counts, the regions or the initial names change."""

import pytest

from strategy.launchblocks import LaunchBlock
from strategy.taskgroups import GroupSim
from taskrt.liveness import results_of

from mpi.models import cnn, lstm_model, mlp
from session_steps import random_changes, small_session


def afresh(session) -> set:
    """The regions _kept_regions keeps, computed from the session's counts now."""
    writers = session._writers_of
    kept = results_of(session.planner.regions, session._read_by_writers,
                      lambda name: [r for r, _ in writers[name].values()]
                      if name in writers else ())
    return kept | session._buffers.initial_names


def _writer_reading(name: str) -> LaunchBlock:
    """A block of one group whose writing tasks read region `name`."""
    sim = GroupSim(None, None, None, None, None, frozenset([name]), {}, None)
    return LaunchBlock.of(0, [], [sim])


@pytest.mark.parametrize("build", [mlp, cnn, lstm_model], ids=["mlp", "cnn", "lstm"])
def test_the_kept_regions_equal_those_computed_afresh(build):
    model, session, devices, rng = small_session(build)
    assert session._kept_regions() == afresh(session)
    for step, op in random_changes(session, model, devices, rng, 14):
        assert session._kept_regions() == afresh(session), f"step {step}: {op.name}"
        if rng.random() < 0.6:
            session.undo()
            assert session._kept_regions() == afresh(session), f"step {step}: undo"
    # A result region read by a writer from now on is no longer a result, and back.
    kept = session._kept_regions()
    sink = next(name for name in sorted(kept - session._buffers.initial_names)
                if name not in session._read_by_writers)
    block = _writer_reading(sink)
    session._count_block(block, 1)
    assert session._kept_regions() == afresh(session) != kept
    session._count_block(block, -1)
    assert session._kept_regions() == afresh(session) == kept
    # A region that gets initial data is kept, and back.
    table = session._buffers
    other = next(name for name in sorted(session.planner.regions) if name not in kept)
    table.set_region(other, table.regions.get(other), True)
    assert session._kept_regions() == afresh(session) == kept | {other}
    table.set_region(other, table.regions.get(other), False)
    assert session._kept_regions() == afresh(session) == kept
    # A new region (a replace's, until its undo) that no task reads is a result.
    regions = session.planner.regions
    regions["new region"] = regions[other]
    assert session._kept_regions() == afresh(session) == kept | {"new region"}
    del regions["new region"]
    assert session._kept_regions() == afresh(session) == kept
