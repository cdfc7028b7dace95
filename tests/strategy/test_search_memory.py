"""Memory as a hard constraint of the search: a model whose data parallelism does not fit
(its weights, gradients and Adam state on every device) gets a strategy that fits, found
from the data-parallel and random starts (no expert), with its peak memory per device; and
the recomputation plan the search chose is the one left on the model."""
import math

import pytest

from parallel_ops import Adam, Model
from parallel_ops.lowering import lower
from strategy.costs import CostModel
from strategy.search import ranked, search
from strategy.simulator import simulate
from taskrt import plan

from sim_graphs import lab

pytestmark = pytest.mark.filterwarnings("ignore::strategy.costs.CostWarning")
WIDTH = 512
CAPACITY = 6_000_000          # bytes per device; data parallelism needs about 8.5 MB


def mlp() -> Model:
    m = Model("wide", seed=0)
    x = m.input("x", (8, WIDTH))
    y = m.input("y", (8,), dtype="int64")
    h = m.linear(x, WIDTH, name="fc1", activation="relu")
    m.softmax_cross_entropy(m.linear(h, WIDTH, name="fc2"), y, name="loss")
    return m


def simulated(m, mm, strategy):
    machine = mm.taskrt_machine()
    low = lower(m, strategy, machine, Adam())
    return simulate(plan(low.launches, machine, initial=low.initial), mm, CostModel())


def test_search_finds_a_strategy_that_fits_where_data_parallelism_does_not():
    m, mm = mlp(), lab(uniform=True, capacity=CAPACITY)
    dp = simulated(m, mm, {})
    assert not dp.valid and min(dp.memory.values()) > 8 * WIDTH * WIDTH * 4 > CAPACITY
    plans = {"none": [], "fc1": [["fc1"]]}
    res = search(m, mm, CostModel(), proposals=400, seed=0, optimizer=Adam(),
                 random_starts=1, recompute=plans)
    assert math.isinf(res.baselines["data_parallel"])
    assert math.isfinite(res.predicted)
    assert res.peak_memory and max(res.peak_memory.values()) <= CAPACITY
    segments = plans[res.recompute]
    assert m.recompute == {name: k for k, seg in enumerate(segments) for name in seg}
    again = simulated(m, mm, res.configs)           # a fresh full simulation agrees
    assert again.valid and again.makespan == pytest.approx(res.predicted)
    assert "peak memory" in res.text()


def test_ranking_of_strategies_over_memory():
    m, mm = mlp(), lab(uniform=True, capacity=CAPACITY)
    dp = simulated(m, mm, {})
    capacity = 4 * CAPACITY
    over = sum(dp.over_capacity.values()) / capacity
    assert ranked(dp, capacity) == pytest.approx(1e6 * (1 + over) + dp.span)
    fits = simulated(m, lab(uniform=True, capacity=10 * CAPACITY), {})
    assert fits.valid and ranked(fits, capacity) == fits.makespan
