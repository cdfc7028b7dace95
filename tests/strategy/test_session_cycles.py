"""A search's sessions hold no reference cycle: a dropped SimulationSession (or TiedSession)
is freed by reference counting alone. The search freezes the heap and pauses the collector
(strategy/search.py, "Garbage collection"), so a session kept alive by a cycle stays until
the process ends: a session's task groups once held a bound method of the session, and bench
search_quality grew ~0.5 GB per cell, past 9 GB."""
import gc
import random
import weakref

import pytest

from apps.gpt import APP, block_of, proxy, search_plans
from apps.simulate import cost_model
from apps.startup import optimizer, setup
from parallel_ops import SGD
from strategy import delta
from strategy.costs import CostModel
from strategy.delta import SimulationSession
from strategy.machines import machine_model
from strategy.search import search
from strategy.tied import TiedSession, search_tied

from mpi.models import cnn, lstm_model, mlp
from session_steps import random_changes

pytestmark = pytest.mark.filterwarnings("ignore::strategy.costs.CostWarning")


@pytest.fixture
def collector_off():
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _alive(kinds) -> int:
    """Objects of `kinds` the collector tracks: alive, or garbage it has not collected."""
    return sum(isinstance(o, kinds) for o in gc.get_objects())


@pytest.mark.parametrize("build", [mlp, cnn, lstm_model], ids=["mlp", "cnn", "lstm"])
@pytest.mark.parametrize("restart_tables", [False, True], ids=["", "tables restarted"])
def test_a_dropped_session_is_freed_by_reference_counting(build, restart_tables, monkeypatch,
                                                          collector_off):
    if restart_tables:          # every change starts the session's tables (and task groups) again
        monkeypatch.setattr(delta, "TABLE_SLACK", -10 ** 9)
    model, _ = build()
    mm = machine_model("p100:1")
    # A first session may import parts of torch lazily (meta tensors), and torch.fx.wrap
    # keeps its own frame, whose callers' frames hold that one session: not ours to fix.
    SimulationSession(model, mm, CostModel(), None, SGD(lr=0.1))
    session = SimulationSession(model, mm, CostModel(), None, SGD(lr=0.1))
    devices = list(range(len(mm.taskrt_machine())))
    rng = random.Random(5)
    changed = 0
    for step, _ in random_changes(session, model, devices, rng, 10):
        changed += 1
        if step % 2:
            session.undo()
    assert changed >= 3
    ref = weakref.ref(session)
    del session
    assert ref() is None, "a SimulationSession outlived its last reference (a reference cycle)"


def test_a_search_leaves_no_session_behind(collector_off):
    model, _ = cnn()
    before = _alive(SimulationSession)
    res = search(model, machine_model("p100:1"), CostModel(), proposals=120, seed=0,
                 optimizer=SGD(lr=0.1))
    assert res.simulated > 20 and len(res.candidates) >= 2    # several chains: sessions dropped
    assert _alive(SimulationSession) == before


def test_a_tied_search_leaves_no_session_behind(collector_off):
    s = setup(APP, ["--small", "--layers", "4", "--width", "64", "--seq-len", "32",
                    "--machine", "dgx-a100-40gb:1", "--batch-size", "16", "--dtype",
                    "bfloat16", "--optimizer", "adam", "--simulate"])
    before = _alive((SimulationSession, TiedSession))
    search_tied(s.network.model, s.machine_model, cost_model(s.config, s.network),
                proxy=lambda k: proxy(s.config, k), block_of=block_of, recompute=search_plans,
                proposals=40, seed=0, optimizer=optimizer(s.config), random_starts=1)
    assert _alive((SimulationSession, TiedSession)) == before
