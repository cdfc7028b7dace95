"""SimulationSession.change_all: several operators' configs changed with one re-plan and one
simulation equal the same changes made one at a time, one undo() takes them all back, and
the search's pair moves made with it follow the same trajectory as pair moves made change by
change (and taken back by undo + changing the first operator back)."""
import random
import warnings

import pytest

import strategy.search as search_mod
from parallel_ops import SGD
from strategy.costs import CostModel
from strategy.delta import SimulationSession
from strategy.machine_model import machine_model
from strategy.search import search

from mpi.models import cnn, lstm_model, random_strategy
from sim_graphs import same_result

warnings.simplefilter("ignore")       # analytic-cost fallback warnings
pytestmark = pytest.mark.filterwarnings("ignore::strategy.costs.CostWarning")


@pytest.mark.parametrize("build", [cnn, lstm_model], ids=["cnn", "lstm"])
def test_change_all_equals_changes_in_turn_and_undoes_at_once(build):
    model, _ = build()
    mm = machine_model("p100:1")
    start = random_strategy(model, 4, seed=5)
    both = SimulationSession(model, mm, CostModel(), dict(start))
    in_turn = SimulationSession(model, mm, CostModel(), dict(start))
    before = both.result
    rng = random.Random(7)
    names = [op.name for op in model.ops]
    for step in range(6):
        configs = [random_strategy(model, 4, seed=100 + step + k) for k in range(2)]
        a, b = rng.sample(names, 2)
        got = both.change_all([(a, configs[0][a]), (b, configs[1][b])])
        in_turn.change(a, configs[0][a])
        want = in_turn.change(b, configs[1][b])
        where = f"step {step}: {a}, {b}"
        same_result(got, want, where)
        assert both.graph.fingerprint() == in_turn.graph.fingerprint(), where
        assert both.configs == in_turn.configs, where
        undone = both.undo()                            # both operators back
        same_result(undone, before, where)
        assert both.configs == start, where
        in_turn.undo()
        in_turn.change(a, start[a])
    fresh = SimulationSession(model, mm, CostModel(), dict(start))
    assert both.graph.fingerprint() == fresh.graph.fingerprint()
    same_result(both.full(), fresh.result, "full simulation after the undos")


def test_change_all_refuses_an_operator_named_twice():
    model, _ = cnn()
    session = SimulationSession(model, machine_model("p100:1"), CostModel())
    op = model.ops[0].name
    cfg = session.configs[op]
    with pytest.raises(ValueError, match="named twice"):
        session.change_all([(op, cfg), (op, cfg)])


class ChangeByChange(SimulationSession):
    """A session without change_all, as the search sees it (strategy/tied.py's sessions):
    pair moves change one operator at a time and take a rejected pair back by undo() and
    changing the first operator back."""
    changes = 0

    def change(self, op_name, config):
        ChangeByChange.changes += 1
        return SimulationSession.change_all(self, [(op_name, config)])

    @property
    def change_all(self):
        raise AttributeError("change_all")


def test_search_with_pairs_at_once_follows_the_same_trajectory(monkeypatch):
    monkeypatch.setattr(search_mod, "PAIR_MOVE", 0.9)
    # every simulation's result is logged: each computes its memory peak (memory last,
    # which skips it for proposals rejected on their time, has tests/strategy/test_memory_last.py)
    monkeypatch.setattr(search_mod.Search, "memory_last", False)
    seen = {}
    ranked = search_mod.ranked

    def logged(result, capacity):
        seen.setdefault(key, []).append((result.makespan, tuple(sorted(result.memory.items()))))
        return ranked(result, capacity)
    monkeypatch.setattr(search_mod, "ranked", logged)
    model, _ = lstm_model()
    runs = {}
    for key, factory in (("sequential", ChangeByChange), ("at once", None)):
        ChangeByChange.changes = 0
        r = search(model, machine_model("p100:1"), CostModel(), proposals=40, seed=3,
                   optimizer=SGD(lr=0.1), session_factory=factory)
        runs[key] = (r, ChangeByChange.changes)
    (seq, seq_changes), (both, _) = runs["sequential"], runs["at once"]
    assert seen["sequential"] == seen["at once"]
    assert seq.predicted == both.predicted and seq.configs == both.configs
    # the sequential path made more changes than there were proposals: pairs
    assert seq_changes > seq.proposals
