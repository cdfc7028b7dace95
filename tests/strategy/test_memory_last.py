"""Memory last (strategy/search.py's module doc): a delta change timed before its memory peak
(SimulationSession.change_timed) gives change_all's span, complete() gives change_all's
SimResult, and undo() after it leaves the session as change_all + undo would (the regions'
buffers of a peak never computed are not left behind); a search that skips the peak of the
proposals its time rejects walks the very chain of one that computes every peak, with fewer
peaks computed, on a machine where memory rejects strategies."""
import random
import warnings

import pytest

import strategy.delta as delta_module
from parallel_ops import SGD
from strategy.costs import CostModel
from strategy.delta import SimulationSession
from strategy.machine_model import HostCost, machine_model
from strategy.search import Search
from strategy.simulator import simulate

from mpi.models import cnn, lstm_model, random_strategy
from sim_graphs import lab, same_result

warnings.simplefilter("ignore")       # analytic-cost fallback warnings
pytestmark = pytest.mark.filterwarnings("ignore::strategy.costs.CostWarning")


HOSTS = {"task": HostCost(2e-5), "copy": HostCost(5e-6, 1e-10), "reduce": HostCost(3e-6, 2e-10)}


@pytest.mark.parametrize("hosts", [False, True], ids=["", "host costs"])
@pytest.mark.parametrize("build", [cnn, lstm_model], ids=["cnn", "lstm"])
def test_a_timed_change_completes_or_undoes_as_change_all(build, hosts):
    model, _ = build()
    mm = machine_model("p100:1")
    if hosts:
        mm = mm.with_host_costs(HOSTS)
    start = random_strategy(model, 4, seed=3)
    timed = SimulationSession(model, mm, CostModel(), dict(start))
    whole = SimulationSession(model, mm, CostModel(), dict(start))
    rng = random.Random(11)
    names = [op.name for op in model.ops]
    for step in range(12):
        changes = [(name, random_strategy(model, 4, seed=200 + step)[name])
                   for name in rng.sample(names, 1 + step % 2)]
        span = timed.change_timed(changes)
        want = whole.change_all(changes)
        where = f"step {step}: {[name for name, _ in changes]}"
        assert span == want.span and timed.result is None, where
        if step % 3 == 0:                   # accepted: its peak computed, kept
            got = timed.complete()
            same_result(got, want, where)
            assert got.busy == want.busy, where     # (named only now: simulator.busy_of)
        else:                               # rejected on its time: undone without a peak
            same_result(timed.undo(), whole.undo(), where)
        assert timed.configs == whole.configs, where
    same_result(timed.result, whole.result, "the end")
    full = simulate(timed.graph, mm, CostModel())
    assert timed.result.memory == full.memory and timed.result.makespan == full.makespan
    assert timed.result.busy == full.busy


def _tight_machine():
    """The 4-device lab machine with room for data parallelism of the cnn, not for its
    operators all on one device: some proposals do not fit."""
    model = cnn(batch=8)[0]
    roomy = lab(uniform=True)
    dp = SimulationSession(model, roomy, CostModel(), None, SGD(lr=0.1)).result
    one = SimulationSession(model, roomy, CostModel(),
                            {op.name: random_strategy(model, 1, seed=0)[op.name]
                             for op in model.ops}, SGD(lr=0.1)).result
    capacity = (max(dp.memory.values()) + max(one.memory.values())) // 2
    assert max(dp.memory.values()) < capacity < max(one.memory.values())
    return model, lab(uniform=True, capacity=capacity)


def test_a_search_skipping_peaks_walks_the_chain_that_computes_them(monkeypatch):
    model, mm = _tight_machine()
    peaks = []
    real = delta_module.SimulationSession._memory

    def counted(self, touched, start, end):
        peaks.append(1)
        return real(self, touched, start, end)
    monkeypatch.setattr(delta_module.SimulationSession, "_memory", counted)
    runs = {}
    for memory_last in (True, False):
        peaks.clear()
        s = Search(model, mm, CostModel(), seed=4, optimizer=SGD(lr=0.1), random_starts=1)
        s.memory_last = memory_last
        result = s.run(proposals=400)
        runs[memory_last] = (result, len(peaks), s)
    (lazy, lazy_peaks, s), (every, every_peaks, _) = runs[True], runs[False]
    assert lazy.configs == every.configs and lazy.predicted == every.predicted
    assert [(c.name, c.proposals, c.accepted, c.improved, c.known, c.failed)
            for c in lazy.candidates] == \
        [(c.name, c.proposals, c.accepted, c.improved, c.known, c.failed)
         for c in every.candidates]
    assert [h[1:3] for h in lazy.history] == [h[1:3] for h in every.history]
    assert lazy.simulated == every.simulated
    # Memory mattered (strategies over capacity were met), and peaks were skipped.
    assert any(v is not None and v[1] > 1e6 for v in s.known.values())
    assert any(v is not None and v[0] is None for v in s.known.values())
    assert lazy_peaks < every_peaks
    # Strategies rejected on their time were proposed again and decided on that bound.
    assert s.bounded > 0


@pytest.mark.parametrize("build", [cnn, lstm_model], ids=["cnn", "lstm"])
def test_peaks_after_an_undone_timed_change_that_restarted_the_tables(build, monkeypatch):
    """A timed change whose simulation starts the session's tables again (strategy/delta.py
    _reset_tables: the regions' buffers are set again at the next peak), then undone without
    a peak: the peaks after it are still the full simulation's (the undo used to set only the
    change's regions in the new table, and later peaks missed every other region)."""
    model, _ = build()
    mm = machine_model("p100:1")
    session = SimulationSession(model, mm, CostModel(), random_strategy(model, 4, seed=3))
    rng = random.Random(5)
    names = [op.name for op in model.ops]
    for step in range(9):
        # the tables start again at every third change, a timed one, undone
        monkeypatch.setattr(delta_module, "TABLE_SLACK", -10 ** 9 if step % 3 == 0 else 10 ** 9)
        name = rng.choice(names)
        config = random_strategy(model, 4, seed=300 + step)[name]
        if step % 3 == 0:
            session.change_timed([(name, config)])
            session.undo()
            continue
        got = session.change(name, config)
        full = simulate(session.graph, mm, CostModel())
        assert got.memory == full.memory, f"step {step}: {name}"
        assert got.makespan == full.makespan, f"step {step}: {name}"
