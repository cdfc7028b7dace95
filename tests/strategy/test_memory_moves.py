"""Memory moves aimed at activations (strategy/moves.py memory_move, SearchSpace.spread): an
out-of-memory chain whose fullest device is filled by activations rather than weights (a
CNN's random start at a large batch) gets proposals that split those activations finer,
weightless operators included; weights are still split where they hold the memory."""
import math
import random
from math import prod

import pytest

from parallel_ops import Adam, Model
from strategy.costs import CostModel
from strategy.delta import SimulationSession
from strategy.moves import bytes_on, fullest_device, memory_move
from strategy.search import search
from strategy.space import SearchSpace

from sim_graphs import lab

pytestmark = pytest.mark.filterwarnings("ignore::strategy.costs.CostWarning")
CAPACITY = 4_000_000        # bytes per device; everything on one device needs far more


def cnn() -> Model:
    m = Model("images", seed=0)
    x = m.input("x", (16, 4, 32, 32))
    y = m.input("y", (16,), dtype="int64")
    h = m.relu(m.conv2d(x, 32, 3, padding=1, name="conv1"), name="act")
    h = m.max_pool2d(m.conv2d(h, 8, 3, padding=1, name="conv2"), 4, name="pool")
    m.softmax_cross_entropy(m.linear(m.flat(h, name="flat"), 10, name="fc"), y, name="loss")
    return m


def parts(op, cfg) -> tuple[int, int]:
    """(parts along sample and attribute dims that split no weight, parts along the rest)."""
    weight_dims = {d.name for d in op.dims if d.kind in ("parameter", "reduction")} \
        if op.labels is None else \
        {name for labels in op.labels.get("weights", ()) for name in labels if name}
    act = [d.name not in weight_dims and d.kind in ("sample", "attribute") for d in op.dims]
    return (prod(cfg.degree(d.name) for d, a in zip(op.dims, act) if a),
            prod(cfg.degree(d.name) for d, a in zip(op.dims, act) if not a))


def test_spread_splits_activations_finer_and_nothing_else_more():
    m = cnn()
    space, rng = SearchSpace(m, 4, 4), random.Random(0)
    for op in m.ops:
        for _ in range(25):
            cfg = space.random_config(op, rng)
            new = space.spread(op, cfg, rng)
            (a, o) = parts(op, cfg)
            if new is None:         # no degrees of this space give more such parts
                assert all(parts(op, space.config(op, t, range(prod(t))))[0] <= a or
                           parts(op, space.config(op, t, range(prod(t))))[1] > o
                           for t in space.degree_tuples(op))
                continue
            assert parts(op, new)[0] > a and parts(op, new)[1] <= o
            assert new.num_parts == len(set(new.devices)) <= 4
            assert space.has_devices(new.devices)
    conv = m.op("conv1")          # output channels split, the input on every device: to
    cfg = space.spread(conv, SearchSpace.config(conv, (1, 4, 1, 1, 1), range(4)),
                       random.Random(1))      # samples (the most activation parts first)
    assert cfg.degree("n") * cfg.degree("h") * cfg.degree("w") > 1 and cfg.degree("c") <= 4


def on_one(m) -> dict:
    """Every operator whole on device 0: out of memory by its activations alone."""
    return {op.name: SearchSpace.config(op, (1,) * len(op.dims), (0,)) for op in m.ops}


def test_memory_move_splits_what_fills_the_fullest_device_weightless_operators_too():
    m, mm = cnn(), lab(uniform=True, capacity=CAPACITY)
    session = SimulationSession(m, mm, CostModel(), on_one(m), Adam())
    weights, activations, saved = bytes_on(session, fullest_device(session.result))
    assert session.result.over_capacity and sum(activations.values()) > 20 * sum(
        weights.values())
    space, rng = SearchSpace.for_machine(m, mm), random.Random(0)
    drawn = set()
    for _ in range(30):
        name, cfg = memory_move(space, session, rng)
        drawn.add(name)
        op = m.op(name)
        (a, o), (a2, o2) = parts(op, session.configs[name]), parts(op, cfg)
        assert (a2 > a and o2 <= o) or (op.weights and o2 > o)     # spread, or shard
    # the largest holders are drawn, weightless operators too (a split of weights never
    # reaches them: shard_move proposes none of them)
    assert {"act", "conv1"} <= drawn
    assert not all(m.op(name).weights for name in drawn)


@pytest.mark.parametrize("seed", range(4))
def test_a_chain_out_of_memory_by_its_activations_gets_into_memory(seed):
    # (with weight splits alone, two or three of these four chains ended over memory)
    m, mm = cnn(), lab(uniform=True, capacity=CAPACITY)
    res = search(m, mm, CostModel(), proposals=120, seed=seed, optimizer=Adam(),
                 random_starts=0, starts={"on one": on_one(m)}, restarts=False)
    run = next(c for c in res.candidates if c.name == "on one")
    assert math.isinf(run.start) and run.over_bytes == 0 and math.isfinite(run.best)
