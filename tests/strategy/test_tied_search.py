"""strategy/tied.py: the GPT's search on 1- and 2-block proxies with one block's configs
tied across blocks. The extrapolation to the full depth is held against full-depth
simulations of the same strategies (every device's peak memory exactly, the iteration
within a few percent), and tied changes keep every block of the deeper proxy equal to the
searched block, through changes, undos and failed changes."""
import random

import pytest

from apps.gpt import APP, block_of, proxy, recompute_segments, search_plans
from apps.simulate import cost_model
from apps.startup import optimizer, setup
from parallel_ops.recompute import segments_of, set_recompute
from strategy.delta import SimulationSession
from strategy.experts import megatron
from strategy.space import SearchSpace
from strategy.tied import (TiedSession, depth, expand, expand_segments, kinds, restrict,
                           search_tied)

pytestmark = pytest.mark.filterwarnings("ignore::strategy.costs.CostWarning")

LAYERS = 4


@pytest.fixture(scope="module")
def gpt():
    s = setup(APP, ["--small", "--layers", str(LAYERS), "--width", "64", "--seq-len", "32",
                    "--machine", "dgx-a100-40gb:1", "--batch-size", "16", "--dtype",
                    "bfloat16", "--optimizer", "adam", "--simulate"])
    return (s, s.network.model, s.machine_model, cost_model(s.config, s.network),
            optimizer(s.config))


def _strategies(full, small, mm):
    space = SearchSpace.for_machine(small, mm)
    rng = random.Random(1)
    out = {"data parallel": None,
           "megatron t=2": restrict(megatron(full, mm.num_devices, 8, 2), small),
           "megatron t=4": restrict(megatron(full, mm.num_devices, 8, 4), small)}
    for k in range(2):
        out[f"random {k}"] = {op.name: space.random_config(op, rng)
                              for op in space.searchable()}
    return out


@pytest.mark.parametrize("plan", ["none", "full", "selective"])
def test_extrapolation_equals_full_depth_simulation(gpt, plan):
    s, full, mm, costs, opt = gpt
    small, deep = proxy(s.config, 1), proxy(s.config, 2)
    set_recompute(small, recompute_segments(small, plan))
    set_recompute(full, recompute_segments(full, plan))
    worst_time = 0.0
    for name, strategy in _strategies(full, small, mm).items():
        tied = TiedSession(small, deep, LAYERS, block_of, mm, costs, strategy, opt)
        real = SimulationSession(full, mm, costs, expand(tied.configs, small, full, block_of),
                                 opt).result
        assert tied.result.memory == real.memory, name      # every device, to the byte
        assert tied.result.valid == real.valid
        worst_time = max(worst_time, abs(tied.result.span / real.span - 1))
    assert worst_time < 0.05


def test_tied_changes_keep_blocks_equal_and_equal_a_fresh_simulation(gpt):
    s, _, mm, costs, opt = gpt
    small, deep = proxy(s.config, 1), proxy(s.config, 2)
    set_recompute(small, recompute_segments(small, "selective"))
    tied = TiedSession(small, deep, LAYERS, block_of, mm, costs, None, opt)
    assert segments_of(deep) == recompute_segments(deep, "selective")
    space = SearchSpace.for_machine(small, mm)
    rng = random.Random(3)
    for k in range(12):
        name, cfg = space.propose(rng, tied.configs)
        try:
            tied.change(name, cfg)
        except Exception:
            continue                          # a config that does not plan: nothing changed
        if k % 3 == 2:
            tied.undo()
        assert dict(tied.deep.configs) == expand(tied.configs, small, deep, block_of)
    of_deep = kinds(deep, block_of)
    for kind in {kind for _, kind in of_deep.values()}:
        assert len({tied.deep.configs[n] for n, (_, k) in of_deep.items() if k == kind}) == 1
    fresh = SimulationSession(deep, mm, costs, dict(tied.deep.configs), opt).result
    assert tied.deep.result.makespan == pytest.approx(fresh.makespan, rel=1e-12)
    assert tied.deep.result.memory == fresh.memory


def test_expand_and_segments():
    s = setup(APP, ["--small", "--layers", "3", "--simulate"])
    full, small = s.network.model, proxy(s.config, 1)
    assert depth(full, block_of) == 3 and depth(small, block_of) == 1
    configs = megatron(small, 8, 8, 2)
    out = expand(configs, small, full, block_of)
    assert set(out) == {op.name for op in full.ops}
    assert out["h2/attn"] == configs["h0/attn"] and out["lm_head"] == configs["lm_head"]
    for plan in ("full", "selective"):
        segs = expand_segments(recompute_segments(small, plan), small, full, block_of)
        assert segs == recompute_segments(full, plan)
    with pytest.raises(ValueError, match="no config for"):
        expand({"h0/attn": configs["h0/attn"]}, small, full, block_of)


def test_search_tied_returns_a_full_depth_strategy(gpt):
    s, full, mm, costs, opt = gpt
    res = search_tied(full, mm, costs, proxy=lambda k: proxy(s.config, k), block_of=block_of,
                      recompute=search_plans, proposals=40, seed=0, optimizer=opt,
                      random_starts=1)
    assert set(res.configs) == {op.name for op in full.ops}
    of_full = kinds(full, block_of)
    for kind in {kind for _, kind in of_full.values()}:
        assert len({res.configs[n] for n, (_, k) in of_full.items() if k == kind}) == 1
    assert segments_of(full) == res.recompute_segments
    assert res.recompute in ("none", "full", "selective")
    real = SimulationSession(full, mm, costs, res.configs, opt).result
    assert max(res.peak_memory.values()) == max(real.memory.values())
    assert res.predicted == pytest.approx(real.makespan, rel=0.05)


def test_search_tied_refuses_proxies_of_the_wrong_depth(gpt):
    s, full, mm, costs, opt = gpt
    with pytest.raises(ValueError, match="proxy\\(k\\) must build"):
        search_tied(full, mm, costs, proxy=lambda k: proxy(s.config, 1), block_of=block_of,
                    proposals=1)
    with pytest.raises(ValueError, match="depths"):
        search_tied(full, mm, costs, proxy=lambda k: proxy(s.config, k), block_of=block_of,
                    depths=(2, 1), proposals=1)


@pytest.mark.parametrize("whole", [False, True])
def test_gpt_search_flag_picks_tied_or_whole_graph(whole):
    """apps/gpt.py --search: the tied search by default (its chain simulated a 1-block
    proxy, and every block of the result is alike), --search-whole-graph the full graph."""
    argv = ["--small", "--layers", "3", "--simulate", "--quiet", "--search", "60",
            "--search-proposals", "12"] + (["--search-whole-graph"] if whole else [])
    s = setup(APP, argv)
    model, res = s.network.model, s.search
    assert set(res.configs) == {op.name for op in model.ops}
    simulated = {name.split("/")[0] for name in res.breakdowns["data_parallel"].op_compute}
    assert {"h0", "h1", "h2"} & simulated == ({"h0", "h1", "h2"} if whole else {"h0"})
    if not whole:
        of_full = kinds(model, block_of)
        for kind in {kind for _, kind in of_full.values()}:
            assert len({res.configs[n] for n, (_, k) in of_full.items() if k == kind}) == 1


def _one_block_on_8():
    s = setup(APP, ["--small", "--simulate", "--layers", "1", "--machine", "dgx-a100-40gb:1",
                    "--batch-size", "16"])
    from strategy.moves import GuidedSpace
    model = s.network.model
    return model, GuidedSpace.for_machine(model, s.machine_model, pow2=True,
                                          families=("node",), max_split=2)


def test_trade_moves_degree_between_samples_and_weights_on_the_same_devices():
    from strategy.moves import trade
    from strategy.standard import data_parallel
    model, space = _one_block_on_8()
    dp = data_parallel(model, list(range(8)))
    rng = random.Random(0)
    cfg = trade(space, model.op("h0/attn"), dp["h0/attn"], rng)
    assert (cfg.degree("n"), cfg.degree("h"), cfg.devices) == (4, 2, dp["h0/attn"].devices)
    back = {trade(space, model.op("h0/attn"), cfg, rng) for _ in range(20)}
    assert dp["h0/attn"] in back                    # and back to data parallelism
    assert all(c.degree("n") * c.degree("h") == 8 and c.devices == cfg.devices for c in back)


def test_aligned_makes_megatrons_row_parallel_and_vocabulary_parallel_loss():
    from strategy.moves import aligned
    from strategy.standard import data_parallel
    model, space = _one_block_on_8()
    mega = megatron(model, 8, 8, 4)
    configs = dict(data_parallel(model, list(range(8))))
    configs["h0/mlp_fc"], configs["lm_head"] = mega["h0/mlp_fc"], mega["lm_head"]
    rng = random.Random(0)
    seen = {}
    for _ in range(60):
        name, cfg = aligned(space, configs, rng)
        seen.setdefault(name, set()).add(cfg)
    assert mega["h0/mlp_proj"] in seen["h0/mlp_proj"]       # [n=2,i=4]: row parallel
    assert mega["loss"] in seen["loss"]                     # [n=2,c=4]


def test_regular_space_proposes_block_operators_by_their_weight():
    """regular_space with the full depth: a block's operator drawn sqrt(depth) times as
    often as one outside the blocks (7 kinds in a block, 6 outside)."""
    from collections import Counter

    from strategy.tied import regular_space
    model, _ = _one_block_on_8()
    mm = setup(APP, ["--small", "--simulate", "--machine", "dgx-a100-40gb:1"]).machine_model
    rng = random.Random(0)
    drawn = Counter(regular_space(model, mm, block_of, 36).draw_op(rng, model.ops).name
                    for _ in range(2000))
    in_blocks = sum(n for name, n in drawn.items() if name.startswith("h0/"))
    assert 0.85 < in_blocks / 2000 < 0.90            # 7 x 6 / (7 x 6 + 6) = 0.875
    drawn = Counter(regular_space(model, mm).draw_op(rng, model.ops).name
                    for _ in range(2000))
    assert 0.5 < sum(n for name, n in drawn.items() if name.startswith("h0/")) / 2000 < 0.58
    # (uniformly: 7 / 13 = 0.54)
