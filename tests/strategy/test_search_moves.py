"""The search's moves beyond one operator's random config (strategy/moves.py): splitting the
weights that hold the fullest device's memory, and switching recomputation segments on and
off inside a chain, each counted by the simulator in time and memory, delta equal to full."""
import argparse
import math
import random
import warnings

import pytest

from apps.gpt import build, search_plans
from parallel_ops import Adam
from parallel_ops.lowering import lower
from parallel_ops.recompute import set_recompute
from strategy.costs import CostModel
from strategy.delta import SimulationSession
from strategy.moves import RecomputeUnits, bytes_on, region_owner, shard_move
from strategy.search import search
from strategy.simulator import simulate
from strategy.space import SearchSpace
from taskrt import plan

from sim_graphs import lab

warnings.simplefilter("ignore")       # analytic-cost fallback warnings
DP_PEAK = 3_500_000        # about what data parallelism needs per device (checked below)
CAPACITY = 3_000_000


def gpt(layers: int = 4, width: int = 64, seq_len: int | None = None, batch: int = 8):
    a = argparse.Namespace(small=True, config=None, seed=0, dtype="float32",
                           batch_size=batch, vocab=None, width=width, heads=None,
                           layers=layers, seq_len=seq_len, recompute="none")
    return build(a).model


def fresh(model, mm, configs, segments):
    """A full simulation of `configs` under `segments`, built from nothing."""
    set_recompute(model, segments)
    machine = mm.taskrt_machine()
    low = lower(model, configs, machine, Adam())
    return simulate(plan(low.launches, machine, initial=low.initial), mm, CostModel())


def test_region_owner_maps_weights_state_gradients_and_outputs_to_their_operator():
    m = gpt(1)
    ops = {op.name: op for op in m.ops}
    for name, owner in [("h0/attn", "h0/attn"), ("h0/attn.in_proj_weight@exp_avg", "h0/attn"),
                        ("h0/ln_1.stats@grad", "h0/ln_1"), ("h0/mlp_fc@re", "h0/mlp_fc"),
                        ("tokens", None)]:
        got = region_owner(name, ops)
        assert (got.name if got else None) == owner


def test_shard_move_splits_the_weights_on_the_fullest_device_finer():
    m, mm = gpt(2), lab(uniform=True)
    session = SimulationSession(m, mm, CostModel(), None, Adam())
    space = SearchSpace.for_machine(m, mm)
    rng = random.Random(0)
    for _ in range(10):
        name, cfg = shard_move(space, session, rng)
        op = m.op(name)
        assert op.weights
        weight_dims = {d for labels in op.labels["weights"] for d in labels if d}
        old = session.configs[name]
        assert any(cfg.degree(d) > old.degree(d) for d in weight_dims)
        assert cfg.num_parts <= mm.num_devices
        device = max(session.result.memory, key=session.result.memory.get)
        before = bytes_on(session, device)[0][name]
        session.change(name, cfg)
        assert bytes_on(session, device)[0].get(name, 0) < before
    # an operator without weights is never a target; a fully split one has no move
    assert space.shard(m.op("h0/add_1"), session.configs["h0/add_1"], rng) is None


def test_bytes_on_is_kept_per_state_and_follows_changes_and_undos():
    """An out-of-memory chain asks bytes_on for the same state proposal after proposal: the
    answer is kept, and recounted once a change or an undo makes another state."""
    from strategy.moves import _bytes_on
    m, mm = gpt(2), lab(uniform=True)
    session = SimulationSession(m, mm, CostModel(), None, Adam())
    space = SearchSpace.for_machine(m, mm)
    rng = random.Random(1)
    device = max(session.result.memory, key=session.result.memory.get)
    first = bytes_on(session, device)
    assert bytes_on(session, device) is first            # same state: not walked again
    other = 0 if device else 1                          # another device: counted anew
    assert bytes_on(session, other) is not first
    assert bytes_on(session, other) == _bytes_on(session, other)
    for k in range(6):
        name, cfg = shard_move(space, session, rng)
        session.change(name, cfg)
        assert bytes_on(session, device) == _bytes_on(session, device)
        if k % 2:
            session.undo()
            assert bytes_on(session, device) == _bytes_on(session, device)


def walked_regions(session, device: int) -> tuple[dict, dict]:
    """bytes_on's first two parts by the plain walk: every region's owner found by name
    (region_owner), its instance and partial-sum rects on `device` summed."""
    ops = {op.name: op for op in session.model.ops}
    weights = {w.name for op in ops.values() for w in op.weights}
    by_weight, by_activation = {}, {}
    for name, rp in session.planner.planners.items():
        op = region_owner(name, ops)
        if op is None:
            continue
        nbytes = sum(rp.region.nbytes(rects[device]) for rects in
                     (rp.instance_rects, rp.partial_rects) if device in rects)
        if nbytes:
            into = by_weight if name.split("@")[0] in weights else by_activation
            into[op.name] = into.get(op.name, 0) + nbytes
    return by_weight, by_activation


def test_bytes_on_regions_equal_the_plain_walk_through_changes_and_undos():
    """bytes_on keeps each region name's owner per session: its counts are the plain walk's
    on every device through shard moves, random configs and undos."""
    from strategy.experts import megatron
    m, mm = gpt(2), lab(uniform=True)
    session = SimulationSession(m, mm, CostModel(), megatron(m, 4, 4, tensor_parallel=2),
                                Adam())
    space = SearchSpace.for_machine(m, mm)
    rng = random.Random(3)
    for k in range(8):
        for device in range(mm.num_devices):
            assert bytes_on(session, device)[:2] == walked_regions(session, device)
        move = shard_move(space, session, rng) if k % 2 else None
        if move is None:
            op = rng.choice(m.ops)
            move = op.name, space.random_config(op, rng)
        session.change(*move)
        if k % 3 == 2:
            session.undo()


def test_shard_move_splits_a_convolution_which_gives_no_labels():
    # conv2d computes every part's rects itself (labels None): its weights split along its
    # parameter (output channels) and reduction (input channels) dims. Crashed the search
    # (AttributeError) when an out-of-memory chain drew a convolution.
    from parallel_ops import Model
    m = Model("cnn", seed=0)
    x = m.input("x", (8, 4, 8, 8))
    m.conv2d(x, 16, 3, padding=1, name="conv")
    conv = m.op("conv")
    assert conv.labels is None
    space = SearchSpace(m, 4, 4)
    dp = SearchSpace.config(conv, (4, 1, 1, 1, 1), (0, 1, 2, 3))
    cfg = space.shard(conv, dp, random.Random(0))
    assert cfg is not None and (cfg.degree("c") > 1 or cfg.degree("ci") > 1)
    assert cfg.num_parts <= 4


def test_recompute_units_are_the_plans_segments_and_name_their_states():
    m = gpt(3)
    plans = search_plans(m)
    units = RecomputeUnits(plans)
    assert len(units) == 6 and units.plans["none"] == frozenset()     # 3 blocks, 3 attentions
    assert units.plans["full"] == frozenset({0, 1, 2})
    assert units.segments(units.plans["full"]) == plans["full"]
    assert units.segments(units.plans["selective"]) == plans["selective"]
    assert units.name(frozenset({0, 1, 2})) == "full"
    assert units.name(frozenset({1})) == "1 of 6 segments: h1/ln_1"


def test_switching_one_block_on_costs_time_and_frees_memory():
    m, mm = gpt(2, width=32, seq_len=128, batch=32), lab(uniform=True)   # activations large
    units = RecomputeUnits(search_plans(m))
    off = SimulationSession(m, mm, CostModel(), None, Adam())
    assert units.target(off, frozenset()) in (0, 1)
    set_recompute(m, units.segments(frozenset({0})))
    on = SimulationSession(m, mm, CostModel(), None, Adam())
    assert on.result.makespan > off.result.makespan
    assert max(on.result.memory.values()) < max(off.result.memory.values())


def test_recomputation_moves_walk_the_same_chain_delta_or_full_and_agree_with_a_fresh_run():
    m, mm = gpt(2), lab(uniform=True)
    kw = dict(proposals=24, seed=1, optimizer=Adam(), random_starts=0,
              recompute=search_plans(m), recompute_move=0.5)
    a = search(m, mm, CostModel(), **kw)
    b = search(m, mm, CostModel(), delta=False, **kw)
    assert a.configs == b.configs and a.predicted == b.predicted
    assert a.recompute == b.recompute
    assert [(c.accepted, c.improved) for c in a.candidates] == \
        [(c.accepted, c.improved) for c in b.candidates]
    again = fresh(m, mm, a.configs, a.recompute_segments)
    assert again.makespan == pytest.approx(a.predicted)
    assert max(again.memory.values()) == max(a.peak_memory.values())


def test_search_from_data_parallel_and_random_starts_fits_a_gpt_that_data_parallel_does_not():
    m, mm = gpt(4), lab(uniform=True, capacity=CAPACITY)
    dp = fresh(m, mm, {}, [])
    assert not dp.valid and min(dp.memory.values()) > DP_PEAK
    res = search(m, mm, CostModel(), proposals=60, seed=0, optimizer=Adam(),
                 random_starts=1, recompute=search_plans(m))
    assert math.isinf(res.baselines["data_parallel"])
    assert math.isfinite(res.predicted)
    assert max(res.peak_memory.values()) <= CAPACITY
    again = fresh(m, mm, res.configs, res.recompute_segments)
    assert again.valid and again.makespan == pytest.approx(res.predicted)


def test_gpt_flops_count_the_blocks_the_search_recomputes():
    from apps.gpt import iteration_flops, model_flops
    m = gpt(4)
    a = argparse.Namespace(small=True, config=None, batch_size=8, vocab=None, width=64,
                           heads=None, layers=4, seq_len=None)
    units = RecomputeUnits(search_plans(m))
    set_recompute(m, units.segments(frozenset({0, 2})))
    assert iteration_flops(a, m) == pytest.approx(model_flops(8, 16, 4, 64, 256, 0.5))
    set_recompute(m, units.segments(units.plans["full"]))
    assert iteration_flops(a, m) == pytest.approx(model_flops(8, 16, 4, 64, 256, True))


def test_a_chain_that_ends_out_of_memory_says_how_far_over_it_is():
    m, mm = gpt(4), lab(uniform=True, capacity=CAPACITY)
    res = search(m, mm, CostModel(), proposals=1, seed=0, optimizer=Adam(), random_starts=0)
    c = res.candidates[0]
    assert 0 < c.over_bytes < DP_PEAK
    assert "over a device's memory" in res.text()


def state_by_op(session, device: int) -> dict:
    """{op name: saved-state bytes on `device`} as the memory model (taskrt.liveness) holds
    them in the session's graph: its STATE buffers, by the keeping launch's operator."""
    from taskrt.liveness import STATE, Liveness
    ops = {op.name: op for op in session.model.ops}
    out: dict = {}
    live = Liveness.of(session.graph)
    for key, dev, nbytes in zip(live.keys, live.device, live.nbytes):
        if key[0] == STATE and dev == device:
            name = key[1].rsplit("/", 1)[0]          # 'h0/attn/recompute@state' -> 'h0/attn'
            while name not in ops:
                name = name.rsplit("/", 1)[0]
            out[name] = out.get(name, 0) + nbytes
    return out


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_bytes_on_counts_the_saved_state_the_memory_model_holds(recompute):
    from apps.gpt import recompute_segments
    from strategy.experts import megatron
    m, mm = gpt(2, width=32, seq_len=64), lab(uniform=True)
    set_recompute(m, recompute_segments(m, recompute))
    session = SimulationSession(m, mm, CostModel(), megatron(m, 4, 4, tensor_parallel=2),
                                Adam())
    for device in range(mm.num_devices):
        want = state_by_op(session, device)
        assert want and want.get("h0/attn", 0) > 0
        assert bytes_on(session, device)[2] == want


def test_out_of_memory_recomputation_target_weighs_saved_state():
    """Attention on long sequences keeps far more (its probabilities, q, k, v, context) than
    its output region; the MLP's output regions are larger than attention's. Counting
    regions only (before: moves.bytes_on without saved state) the target was the MLP
    segment, which frees less: the simulated peak says which frees more."""
    m, mm = gpt(1, width=32, seq_len=128, batch=8), lab(uniform=True)
    plans = {"none": [], "attention": [["h0/attn"]], "mlp": [["h0/mlp_fc", "h0/mlp_proj"]]}
    units = RecomputeUnits(plans)
    attn, mlp = units.plans["attention"], units.plans["mlp"]
    off = SimulationSession(m, mm, CostModel(), None, Adam())
    peaks = {}
    for state in (attn, mlp):
        set_recompute(m, units.segments(state))
        peaks[state] = max(SimulationSession(m, mm, CostModel(), None, Adam())
                           .result.memory.values())
    assert peaks[attn] < peaks[mlp] < max(off.result.memory.values())
    assert units.target(off, frozenset()) == next(iter(attn))


def test_a_block_and_its_attention_exclude_each_other():
    m = gpt(2)
    plans = search_plans(m)
    units = RecomputeUnits(plans)
    assert len(units) == 4            # two blocks, two attention operators
    full, selective = units.plans["full"], units.plans["selective"]
    h0_block = next(k for k in full if "h0/ln_1" in units.units[k])
    h0_attn = next(k for k in selective if units.units[k] == ("h0/attn",))
    assert units.excludes[h0_block] == {h0_attn} and units.excludes[h0_attn] == {h0_block}
    mixed = units.toggle(full, h0_attn)                  # block 0 selective, block 1 full
    assert mixed == (full - {h0_block}) | {h0_attn}
    assert units.toggle(mixed, h0_block) == full
    assert units.toggle(mixed, h0_attn) == full - {h0_block}    # block 0: none
    assert units.name(mixed) == "2 of 4 segments: h1/ln_1, h0/attn alone"
    set_recompute(m, units.segments(mixed))              # a legal set of segments
    assert m.recompute["h0/attn"] != m.recompute["h1/attn"]
    assert "h0/mlp_fc" not in m.recompute


def test_selective_recomputation_costs_less_time_and_frees_less_memory_than_full(monkeypatch):
    """Every buffer a temporary (else this small model's activations are kept as small
    buffers): the simulated peak drops from none to selective by at least the saved state
    of every attention but the one being recomputed, and further with full; time rises."""
    monkeypatch.setenv("TASKRT_MIN_TEMPORARY_BYTES", "0")
    m, mm = gpt(4, width=32, seq_len=128, batch=8), lab(uniform=True)
    units = RecomputeUnits(search_plans(m))
    sim = {}
    for kind in ("none", "selective", "full"):
        set_recompute(m, units.segments(units.plans[kind]))
        sim[kind] = SimulationSession(m, mm, CostModel(), None, Adam())
    peak = {k: max(s.result.memory.values()) for k, s in sim.items()}
    assert peak["full"] < peak["selective"] < peak["none"]
    attention_state = bytes_on(sim["none"], 0)[2]["h0/attn"]
    assert peak["none"] - peak["selective"] >= 3 * attention_state
    time = {k: s.result.makespan for k, s in sim.items()}
    assert time["none"] < time["selective"] < time["full"]



def test_search_mixes_none_selective_and_full_blocks_faster_than_every_plan(monkeypatch):
    """Every buffer a temporary; a capacity no recomputation is over (6.1 MB) and every
    attention recomputed fits (3.6 MB): the chain switches single segments and ends with
    a mix that is none of the named plans (with seed 1: three attentions recomputed, the
    last block not) and fits and is faster than every named plan that fits; a fresh
    simulation of it agrees."""
    monkeypatch.setenv("TASKRT_MIN_TEMPORARY_BYTES", "0")
    m, mm = gpt(4, width=32, seq_len=128, batch=8), lab(uniform=True, capacity=4_500_000)
    plans = search_plans(m)
    named = {kind: fresh(m, mm, {}, segs) for kind, segs in plans.items()}
    assert not named["none"].valid and named["selective"].valid and named["full"].valid
    res = search(m, mm, CostModel(), proposals=30, seed=1, optimizer=Adam(),
                 random_starts=0, recompute=plans, recompute_move=0.5)
    assert res.recompute not in plans and res.recompute.endswith(" alone")
    assert 0 < len(res.recompute_segments) < 4
    assert res.predicted < min(named["selective"].makespan, named["full"].makespan)
    again = fresh(m, mm, res.configs, res.recompute_segments)
    assert again.valid and again.makespan == pytest.approx(res.predicted)
