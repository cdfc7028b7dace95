"""SimulationSession._kept_regions gives its last answer again while nothing it reads
changed (the counts of regions read by writing tasks, the planner's regions, the regions
with initial data): equal to the answer computed afresh after any change and undo, and
a new answer as soon as the counts, the regions or the initial names change."""
import random

import pytest

from parallel_ops import SGD
from parallel_ops.errors import ConfigError
from strategy.costs import CostModel
from strategy.delta import SimulationSession
from strategy.launchblocks import LaunchBlock
from strategy.machines import machine_model
from strategy.standard import random_config
from strategy.taskgroups import GroupSim
from taskrt import PlanError
from taskrt.liveness import results_of

from mpi.models import cnn, lstm_model, mlp


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
    model, _ = build()
    mm = machine_model("p100:1")
    session = SimulationSession(model, mm, CostModel(), None, SGD(lr=0.1))
    devices = list(range(len(mm.taskrt_machine())))
    rng = random.Random(5)
    assert session._kept_regions() == afresh(session)
    for step in range(14):
        op = rng.choice(model.ops)
        try:
            session.change(op.name, random_config(op, devices, rng))
        except (ConfigError, PlanError):
            continue
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
