"""An undo puts the session's buffer table (strategy/delta_memory.py) back as it was before
the change: each region's buffers, the regions with initial data, the current byte sizes and
the persistent sums; for a timed change undone before its peak (nothing in the table was
set: delta.py notes the regions only when the peak is computed, in change_all or
complete()), after its peak was completed, and after change_all."""
import warnings

import numpy as np
import pytest

from parallel_ops.errors import ConfigError
from strategy.standard import random_config
from taskrt import PlanError

from mpi.models import cnn, lstm_model, mlp
from session_steps import small_session

warnings.simplefilter("ignore")


def table_state(session):
    t = session._buffers
    sizes = t._sizes()
    regions = {name: None if e is None else tuple(map(tuple, e))
               for name, e in t.regions.items()}
    used = sorted(int(i) for e in t.regions.values() if e is not None for i in e[0])
    return (regions, set(t.initial_names), [int(sizes[i]) for i in used],
            t._persistent_bytes.tolist(), t._persistent_count.tolist(),
            None if t._kept is None else set(t._kept))


@pytest.mark.parametrize("build", [mlp, cnn, lstm_model], ids=["mlp", "cnn", "lstm"])
def test_undo_puts_the_buffer_table_back(build):
    model, session, devices, rng = small_session(build)
    undone = {"timed": 0, "completed": 0, "change_all": 0}
    for step in range(30):
        op = rng.choice(model.ops)
        before = table_state(session)
        way = rng.choice(list(undone))
        try:
            if way == "change_all":
                session.change_all([(op.name, random_config(op, devices, rng))])
            else:
                session.change_timed([(op.name, random_config(op, devices, rng))])
                if way == "completed":
                    session.complete()
        except (ConfigError, PlanError):
            continue
        if rng.random() < 0.7:
            session.undo()
            undone[way] += 1
            assert table_state(session) == before, f"step {step}: {way} {op.name} undone"
            assert np.array_equal(session.result.end, session.full().end)
        else:
            session.complete()
    assert min(undone.values()) >= 3, undone
