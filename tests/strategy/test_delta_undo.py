"""SimulationSession.undo and Planner.undo: taking back a change gives exactly the graph and
simulation of before (same fingerprint, same times, same memory), after any sequence of
changes and undos; a change that fails leaves the session as it was."""
import random

import pytest

from parallel_ops import SGD
from parallel_ops.errors import ConfigError
from strategy.costs import CostModel
from strategy import delta
from strategy.delta import SimulationSession
from strategy.machines import machine_model
from strategy.standard import random_config
from taskrt import PlanError

from mpi.models import cnn, lstm_model, mlp


def snapshot(session):
    g, r = session.graph, session.result
    return (g.fingerprint(), dict(g.instance_rects), r.makespan, list(r.start), list(r.end),
            dict(r.memory), dict(session.configs))


@pytest.mark.parametrize("build", [mlp, cnn, lstm_model], ids=["mlp", "cnn", "lstm"])
@pytest.mark.parametrize("restart_tables", [False, True], ids=["", "tables restarted"])
def test_undo_restores_graph_and_simulation_exactly(build, restart_tables, monkeypatch):
    model, _ = build()
    mm = machine_model("p100:1")
    costs = CostModel()
    session = SimulationSession(model, mm, costs, None, SGD(lr=0.1))
    devices = list(range(len(mm.taskrt_machine())))
    rng = random.Random(3)
    undone = 0
    for step in range(12):
        if restart_tables:      # the session's tables start again at every other change
            monkeypatch.setattr(delta, "TABLE_SLACK", -10 ** 9 if step % 2 else 10 ** 9)
        op = rng.choice(model.ops)
        before = snapshot(session)
        try:
            session.change(op.name, random_config(op, devices, rng))
        except (ConfigError, PlanError):
            assert snapshot(session) == before, f"step {step}: a failed change left traces"
            continue
        changed = snapshot(session)
        full = session.full()       # every change equals a full simulation, memory included
        assert full.memory == session.result.memory, f"step {step}: memory after {op.name}"
        assert full.makespan == session.result.makespan
        if rng.random() < 0.6:
            session.undo()
            undone += 1
            assert snapshot(session) == before, f"step {step}: undo of {op.name}"
            # The restored session is a working one: a full simulation agrees with it, and a
            # change after the undo matches a fresh session with the same configs.
            full = session.full()
            assert full.makespan == session.result.makespan
            assert full.memory == session.result.memory
        else:
            assert snapshot(session) == changed
    assert undone >= 3
    fresh = SimulationSession(model, mm, costs, session.configs, SGD(lr=0.1))
    assert fresh.graph.fingerprint() == session.graph.fingerprint()
    assert fresh.result.makespan == session.result.makespan
    assert fresh.result.memory == session.result.memory


def test_undo_twice_or_before_any_change_is_an_error():
    model, _ = mlp()
    mm = machine_model("p100:1")
    session = SimulationSession(model, mm, CostModel(), None, SGD(lr=0.1))
    with pytest.raises(ValueError, match="no change to take back"):
        session.undo()
    op = model.ops[0]
    session.change(op.name, random_config(op, [0, 1], random.Random(0)))
    session.undo()
    with pytest.raises(ValueError, match="no change to take back"):
        session.undo()
