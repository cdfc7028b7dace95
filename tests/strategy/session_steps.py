"""The session tests' common steps: a SimulationSession of a small test model on one P100
node of four devices, and random valid changes of it (test_kept_answer.py,
test_undo_table.py, test_session_cycles.py)."""
from __future__ import annotations

import random

from parallel_ops import SGD
from parallel_ops.errors import ConfigError
from strategy.costs import CostModel
from strategy.delta import SimulationSession
from strategy.machines import machine_model
from strategy.standard import random_config
from taskrt import PlanError


def small_session(build, seed: int = 5) -> tuple:
    """(model, its data-parallel session on p100:1, the devices, a Random(seed)) of the
    test model `build()` makes (tests/mpi/models.py)."""
    model, _ = build()
    mm = machine_model("p100:1")
    session = SimulationSession(model, mm, CostModel(), None, SGD(lr=0.1))
    return model, session, list(range(len(mm.taskrt_machine()))), random.Random(seed)


def random_changes(session, model, devices, rng, steps: int):
    """Yield (step, op) after each of `steps` random changes (an operator and a config
    drawn from `rng`) the session took; one that does not fit or plan is skipped."""
    for step in range(steps):
        op = rng.choice(model.ops)
        try:
            session.change(op.name, random_config(op, devices, rng))
        except (ConfigError, PlanError):
            continue
        yield step, op
