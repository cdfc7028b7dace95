"""Pair moves of the search (strategy/search.py PAIR_MOVE, SearchSpace.partners/match): an
operator's new config also given, matched, to a neighbour in the dataflow; a rejected or
failed pair leaves the session as it was."""
import pytest

from parallel_ops import SGD
from parallel_ops.config import ParallelConfig
from parallel_ops.errors import ConfigError
from strategy.delta import SimulationSession
from strategy.search import Search
from strategy.space import SearchSpace

pytestmark = pytest.mark.filterwarnings("ignore::strategy.costs.CostWarning")


def cfg(text_degrees, devices):
    return ParallelConfig(tuple(text_degrees), tuple(devices))


def test_partners_are_dataflow_neighbours_through_frozen_operators(setting):
    m, mm, _ = setting
    ops = {op.name: op for op in m.ops}
    space = SearchSpace.for_machine(m, mm, frozen={"relu1", "loss"})
    assert [o.name for o in space.partners(ops["fc1"])] == ["fc2"]
    assert [o.name for o in space.partners(ops["fc2"])] == ["fc1"]
    whole = SearchSpace.for_machine(m, mm)
    assert [o.name for o in whole.partners(ops["fc2"])] == ["relu1", "loss"]
    assert whole.partners(ops["loss"]) == [ops["fc2"]]


def test_match_keeps_the_devices_and_the_sample_degree(setting):
    m, mm, _ = setting
    ops = {op.name: op for op in m.ops}
    space = SearchSpace.for_machine(m, mm).restricted(frozen={"relu1", "loss"})
    fc1, fc2, relu = ops["fc1"], ops["fc2"], ops["relu1"]
    assert space.match(fc2, cfg((("n", 2),), (2, 3)), fc1) == cfg((("n", 2),), (2, 3))
    assert space.match(fc2, cfg((("o", 4),), (0, 1, 2, 3)), fc1) == \
        cfg((("o", 4),), (0, 1, 2, 3))
    # relu1's attribute dim is not in the restricted space: its parts go where fc2 has room
    assert space.match(fc2, cfg((("a1", 2),), (0, 1)), relu) == cfg((("o", 2),), (0, 1))
    # devices outside the space's families: no match
    assert space.match(fc2, cfg((("n", 2),), (1, 2)), fc1) is None


def _same(session, fresh):
    assert session.configs == fresh.configs
    assert session.result.makespan == pytest.approx(fresh.result.makespan, rel=1e-12)
    assert session.result.memory == fresh.result.memory


def test_a_rejected_pair_move_leaves_the_session_as_a_fresh_one(setting):
    m, mm, costs = setting
    opt = SGD(lr=0.1)
    s = Search(m, mm, costs, optimizer=opt)
    session = SimulationSession(m, mm, costs, None, opt)
    before = dict(session.configs)
    move = ("pair", "fc1", cfg((("o", 2),), (2, 3)), "fc2", cfg((("o", 2),), (2, 3)),
            before["fc1"])
    changed = s._change_pair(session, move)
    _same(session, SimulationSession(m, mm, costs, {**before, "fc1": move[2],
                                                    "fc2": move[4]}, opt))
    assert changed.makespan == session.result.makespan
    assert s._back_to((session, None), move, session) is session
    _same(session, SimulationSession(m, mm, costs, before, opt))


def test_a_pair_move_whose_second_change_fails_leaves_the_session_as_before(setting):
    m, mm, costs = setting
    opt = SGD(lr=0.1)
    s = Search(m, mm, costs, optimizer=opt)
    session = SimulationSession(m, mm, costs, None, opt)
    before = dict(session.configs)
    bad = cfg((("n", 2),), (0, 9))                 # device 9 of 4
    move = ("pair", "fc1", cfg((("n", 2),), (0, 1)), "fc2", bad, before["fc1"])
    with pytest.raises(ConfigError):
        s._change_pair(session, move)
    _same(session, SimulationSession(m, mm, costs, before, opt))


def test_chains_make_pair_moves(setting):
    m, mm, costs = setting
    space = SearchSpace.for_machine(m, mm).restricted(frozen={"relu1", "loss"})
    s = Search(m, mm, costs, optimizer=SGD(lr=0.1), space=space, seed=0)
    session = SimulationSession(m, mm, costs, None, SGD(lr=0.1))
    moves = [s._propose(session, True) for _ in range(200)]
    pairs = [mv for mv in moves if mv[0] == "pair"]
    assert 30 <= len(pairs) <= 90                   # PAIR_MOVE = 0.3 of 200
    for _, a, ca, b, cb, old in pairs:
        assert {a, b} == {"fc1", "fc2"} and old == session.configs[a]
        assert ca.devices == cb.devices and ca.degree("n") == cb.degree("n")
