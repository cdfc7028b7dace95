"""An out-of-memory chain's moves (strategy/memory_moves.py): where activations fill the
fullest device, an operator and its dataflow neighbours are given data parallelism, and a
random start of a small CNN that weight splits never brought into memory gets there."""
import math
import random
import warnings

import pytest

from parallel_ops import Adam, Model
from strategy.costs import CostModel
from strategy.delta import SimulationSession
from strategy.memory_moves import data_parallel, memory_move, spread_move
from strategy.moves import bytes_on, fullest_device
from strategy.search import Search, search
from strategy.space import SearchSpace

from sim_graphs import lab

warnings.simplefilter("ignore")       # analytic-cost fallback warnings
pytestmark = pytest.mark.filterwarnings("ignore::strategy.costs.CostWarning")
CAPACITY = 20_000_000      # data parallelism needs ~16.8 MB a device, random starts 38-60 MB


def cnn() -> Model:
    """Six 3x3 convolutions on 32x32 images: activations hold nearly all the bytes."""
    m = Model("cnn", seed=0)
    x = m.input("x", (32, 8, 32, 32))
    y = m.input("y", (32,), dtype="int64")
    h = x
    for k in range(6):
        h = m.relu(m.conv2d(h, 32, 3, padding=1, name=f"conv{k}"), name=f"relu{k}")
    logits = m.linear(m.flat(m.max_pool2d(h, 2, name="pool"), name="flat"), 10, name="fc")
    m.softmax_cross_entropy(logits, y, name="loss")
    return m


def random_start(m, mm, seed: int) -> dict:
    return Search(m, mm, CostModel(), optimizer=Adam(), seed=seed).candidates()[1][1]


def test_spread_move_gives_an_operator_and_its_neighbours_data_parallelism():
    m, mm = cnn(), lab(uniform=True, capacity=CAPACITY)
    session = SimulationSession(m, mm, CostModel(), random_start(m, mm, 0), Adam())
    assert not session.result.valid
    space = SearchSpace.for_machine(m, mm)
    held = bytes_on(session, fullest_device(session.result))[1]
    weights = bytes_on(session, fullest_device(session.result))[0]
    assert sum(held.values()) > 20 * sum(weights.values())
    rng, groups = random.Random(0), 0
    for _ in range(10):
        move = spread_move(space, session, rng)
        groups += move[0] == "group"
        changes = move[1] if move[0] == "group" else [move[1:3]]
        names = {name for name, _ in changes}
        assert len(names) == len(changes) and len(names) >= 1
        for name, cfg in changes:
            op = m.op(name)
            assert cfg == data_parallel(space, op) != session.configs[name]
            assert cfg.devices == tuple(range(4)) and cfg.num_parts == 4
            assert [d.name for d in op.dims if cfg.degree(d.name) > 1] == \
                [d.name for d in op.dims if d.kind == "sample"]
        partners = {p.name for p in space.partners(m.op(changes[0][0]))}
        assert names - {changes[0][0]} <= partners
    assert groups >= 5         # neighbours not data parallel yet move with the drawn one
    dp = {op.name: data_parallel(space, op) for op in space.searchable()}
    at_dp = SimulationSession(m, mm, CostModel(), dp, Adam())
    assert at_dp.result.valid and spread_move(space, at_dp, rng) is None


@pytest.mark.parametrize("seed", [0, 1])
def test_a_random_start_over_memory_by_activations_gets_into_memory(seed):
    """Weight splits alone (before 2026-12-07) left this chain out of memory for all its
    350 proposals (seeds 0-3); with spreads it fits within 100 and keeps searching."""
    m, mm = cnn(), lab(uniform=True, capacity=CAPACITY)
    res = search(m, mm, CostModel(), proposals=150, seed=seed, optimizer=Adam(),
                 restarts=False)
    chain = res.candidates[1]
    assert chain.name == "random 0" and math.isinf(chain.start)
    assert math.isfinite(chain.best) and chain.over_bytes == 0
    assert math.isfinite(res.predicted) and res.predicted <= res.baselines["data_parallel"]


def test_memory_move_splits_weights_where_activations_are_spread_already():
    """Data parallelism of a GPT over memory by its weights and Adam state (78% of the
    fullest device's bytes): no spread has anything to change, every move is a weight
    split (moves.shard_move)."""
    from test_search_moves import gpt
    m, mm = gpt(2), lab(uniform=True)
    session = SimulationSession(m, mm, CostModel(), None, Adam())
    space = SearchSpace.for_machine(m, mm)
    rng = random.Random(0)
    assert spread_move(space, session, rng) is None
    for _ in range(10):
        kind, name, cfg = memory_move(space, session, rng)
        op = m.op(name)
        weight_dims = {d for labels in op.labels["weights"] for d in labels if d}
        assert kind == "op" and op.weights
        assert any(cfg.degree(d) > session.configs[name].degree(d) for d in weight_dims)
