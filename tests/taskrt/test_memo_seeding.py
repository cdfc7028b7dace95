"""A region's plan made before any replace() (by add_launch, or installed from its class by
add_launches) is remembered when replace() first re-plans the region
(regionplans.remember_current), so changing an operator back -- what the search does to
take back a rejected pair move -- takes every touched region's plan back from the memo, and
the graph is still exactly a full plan's."""
import warnings

import numpy as np
import pytest

from strategy.costs import CostModel
from strategy.delta import SimulationSession
from strategy.machine_model import machine_model
from taskrt import Machine, plan

from mpi.models import cnn, lstm_model, random_strategy
from plan_checks import assert_same_plan, planner_of, replace_strategy

warnings.simplefilter("ignore")       # analytic-cost fallback warnings


@pytest.mark.parametrize("build", [cnn, lstm_model], ids=["cnn", "lstm"])
def test_changing_back_takes_the_built_plans_back(build):
    model, _ = build()
    machine = Machine.grid(4, 1)
    start = random_strategy(model, 4, seed=1)
    other = random_strategy(model, 4, seed=2)
    planner = planner_of(model, start, machine)
    for op in model.ops:
        if other[op.name] == start[op.name]:
            continue
        replace_strategy(planner, model, dict(start, **{op.name: other[op.name]}), machine)
        hits, misses = planner.memo.hits, planner.memo.misses
        new = replace_strategy(planner, model, start, machine)       # back, no undo
        assert planner.memo.misses == misses, f"{op.name}: a region planned again"
        assert planner.memo.hits > hits
        assert_same_plan(planner.finish(), plan(new.launches, machine, initial=new.initial),
                         f"{op.name} changed back")


def test_delta_session_changed_back_equals_full_simulation():
    model, _ = lstm_model()
    mm = machine_model("p100:1")
    start = random_strategy(model, 4, seed=3)
    other = random_strategy(model, 4, seed=4)
    session = SimulationSession(model, mm, CostModel(), dict(start))
    before = session.result
    changed = 0
    for op in model.ops:
        if other[op.name] == start[op.name]:
            continue
        session.change(op.name, other[op.name])
        misses = session.planner.memo.misses
        got = session.change(op.name, start[op.name])
        assert session.planner.memo.misses == misses, op.name
        assert got.makespan == before.makespan, op.name
        assert np.array_equal(got.start, before.start), op.name
        assert got.memory == before.memory, op.name
        changed += 1
    assert changed
    fresh = SimulationSession(model, mm, CostModel(), dict(start))
    assert session.graph.fingerprint() == fresh.graph.fingerprint()
