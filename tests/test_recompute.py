"""Activation recomputation (parallel_ops/recompute.py): numerics equal to one device in
float64 (per-block and attention-only segments under Megatron's t=2), the launches it adds
and where, and the memory model against hand counts and the executor's measured peak."""
from __future__ import annotations

import argparse

import pytest
import torch

from apps.gpt import block_of, build, recompute_segments
from parallel_ops import SGD, Adam, ConfigError, Model
from parallel_ops.recompute import per_block, segments_of, set_recompute
from strategy.experts import megatron
from strategy.simulator import memory_per_device
from taskrt import Machine
from taskrt.liveness import Liveness

WIDTH, BATCH, LAYERS = 32, 256, 8
ACT = BATCH * WIDTH * 8                 # bytes of one float64 activation
SEGMENTS = [["fc1", "fc2", "fc3", "fc4"], ["fc5", "fc6", "fc7", "fc8"]]


def small_gpt(recompute: str):
    a = argparse.Namespace(small=True, config=None, seed=0, dtype="float64", batch_size=4,
                           vocab=None, width=None, heads=None, layers=None, seq_len=None,
                           recompute=recompute)
    return build(a)


@pytest.fixture(scope="module")
def one_device():
    net = small_gpt("none")
    feeds = net.synthetic(0, 0)
    tr = net.model.compile(Machine.local(1), {}, SGD(lr=0.1), executor="local")
    losses = [tr.step(feeds) for _ in range(2)]
    return feeds, losses, {w.name: tr.read(w.name) for w in net.model.weights}


@pytest.mark.parametrize("kind", ["full", "selective"])
def test_recomputed_megatron_gpt_trains_like_one_device(one_device, kind):
    feeds, losses, weights = one_device
    net = small_gpt(kind)
    assert net.model.recompute                       # the segments are set
    tr = net.model.compile(Machine.local(2), megatron(net.model, 2, 2, tensor_parallel=2),
                           SGD(lr=0.1), executor="local")
    for want in losses:
        assert tr.step(feeds) == pytest.approx(want, rel=1e-12, abs=1e-12)
    for name, w in weights.items():
        torch.testing.assert_close(tr.read(name), w, rtol=1e-9, atol=1e-9)


def test_full_recompute_segments_are_the_blocks():
    net = small_gpt("full")
    segs = recompute_segments(net.model, "full")
    assert [s[0] for s in segs] == ["h0/ln_1", "h1/ln_1"]
    assert segs[0] == ["h0/ln_1", "h0/attn", "h0/add_1", "h0/ln_2", "h0/mlp_fc", "h0/mlp_proj",
                       "h0/add_2"]
    assert recompute_segments(net.model, "selective") == [["h0/attn"], ["h1/attn"]]
    assert block_of(net.model.op("lm_head")) is None


def chain(segments=()) -> Model:
    """x -> fc1 -> ... -> fc<LAYERS> -> loss, float64, recomputing `segments`."""
    m = Model("chain", seed=0, dtype="float64")
    h = m.input("x", (BATCH, WIDTH))
    y = m.input("y", (BATCH,), dtype="int64")
    for k in range(1, LAYERS + 1):
        h = m.linear(h, WIDTH, name=f"fc{k}", activation="relu")
    m.softmax_cross_entropy(h, y, name="loss")
    set_recompute(m, segments)
    return m


def feeds():
    g = torch.Generator().manual_seed(1)
    return {"x": torch.randn(BATCH, WIDTH, generator=g, dtype=torch.float64),
            "y": torch.randint(0, WIDTH, (BATCH,), generator=g)}


def test_launch_order_and_state():
    m = chain([["fc1", "fc2"], ["fc3", "fc4"]])
    tr = m.compile(Machine.local(1), {}, SGD(lr=0.1), executor="local")
    names = [launch.name for launch in tr.lowered.launches]
    # each segment runs again, in program order, right before its first backward launch
    bwd = names.index("loss/read")          # the loss writes the logits' gradient forward
    assert names[bwd + 1:bwd + 13] == [
        "fc8/bwd", "fc7/bwd", "fc6/bwd", "fc5/bwd",
        "fc3/recompute", "fc4/recompute", "fc4/bwd", "fc3/bwd",
        "fc1/recompute", "fc2/recompute", "fc2/bwd", "fc1/bwd"]
    by_name = {launch.name: launch for launch in tr.lowered.launches}
    assert not by_name["fc2/fwd"].args.grad            # the forward keeps nothing
    assert by_name["fc2/recompute"].args.grad
    assert by_name["fc2/bwd"].state_from == "fc2/recompute"

    def regions(name):
        launch = by_name[name]
        return [req.region.name for req in launch.requirements(launch.colors[0])]
    # inside a segment the recomputed activation; the segment's input (fc2, made by the
    # other segment) and the model's input as they were kept
    assert regions("fc2/recompute") == ["fc1@re", "fc2.weight", "fc2.bias", "fc2@re"]
    assert regions("fc3/recompute") == ["fc2", "fc3.weight", "fc3.bias", "fc3@re"]
    assert regions("fc1/recompute")[0] == "x"
    assert regions("fc2/bwd")[:2] == ["fc2@grad", "fc1@re"]


def _live_at(live: Liveness, node_id: int) -> int:
    """Bytes of temporaries whose first user is at or before node_id and last at or after."""
    return sum(n for n, users in zip(live.nbytes, live.users)
               if users[0] <= node_id <= users[-1])


def test_activations_dropped_by_hand(monkeypatch):
    monkeypatch.setenv("TASKRT_MIN_TEMPORARY_BYTES", "0")      # every buffer a temporary
    counts = {}
    for label, segs in (("keep", []), ("recompute", SEGMENTS)):
        tr = chain(segs).compile(Machine.local(1), {}, SGD(lr=0.1), executor="local")
        g = tr.graph
        at = next(n.id for n in g.nodes if n.kind == "task" and n.launch.name == "loss/read")
        counts[label] = _live_at(Liveness.of(g), at)
    # between forward and backward the outputs of fc1-3 and fc5-7 (inside a segment) are
    # not kept; fc4's (the next segment's input) and fc8's (the loss reads it) are
    assert counts["keep"] - counts["recompute"] == 6 * ACT


def test_measured_peak_equals_the_model_and_drops(monkeypatch):
    monkeypatch.setenv("TASKRT_MIN_TEMPORARY_BYTES", "0")      # every buffer a temporary
    peaks = {}
    for label, segs in (("keep", []), ("recompute", SEGMENTS)):
        m = chain(segs)
        tr = m.compile(Machine.local(1), {}, Adam(), executor="local")
        tr.step(feeds())
        measured = tr.executor.store.bytes_per_device()[0]
        n = len(tr.graph.nodes)
        assert measured == memory_per_device(tr.graph, list(range(n)),
                                             list(range(1, n + 1)))[0]
        peaks[label] = measured
    # The peak is at fc8's backward. Kept: fc1-fc7 (7 activations). Recomputing: fc4 (the
    # second segment's input) and the second segment's fc5@re-fc8@re (5); the gradients,
    # weights and Adam's state are the same.
    assert peaks["keep"] - peaks["recompute"] == 2 * ACT


def test_recompute_refuses_the_loss_and_unknown_ops():
    m = chain()
    with pytest.raises(ConfigError, match=r"'loss' \(softmax_ce\) cannot be recomputed: its "
                                          r"forward writes a gradient.*'fc9' is not an operator"):
        set_recompute(m, [["loss", "fc9"]])
    with pytest.raises(ConfigError, match=r"'fc1' is in segments 0 and 1"):
        set_recompute(m, [["fc1"], ["fc1"]])
    assert per_block(m, lambda op: "all") == [[f"fc{k}" for k in range(1, LAYERS + 1)]]



@pytest.mark.parametrize("strategy", ["megatron", "random"])
def test_mixed_selective_and_full_recompute_equals_eager_pytorch(strategy):
    """A state the search can reach (strategy/moves.py RecomputeUnits.toggle from full
    recomputation: block 0 selective, attention alone, block 1 full) trains like eager
    PyTorch (tests/ops/oracle.py: every op's reference with torch autograd and torch.optim's
    Adam), float64 to 1e-9: loss, every activation and gradient, the weights after each step,
    under Megatron's t=2 and a random strategy on 2 devices."""
    from apps.gpt import search_plans
    from mpi.models import random_strategy
    from ops.oracle import assert_matches
    from strategy.moves import RecomputeUnits
    net = small_gpt("none")
    m = net.model
    units = RecomputeUnits(search_plans(m))
    h0_attn = next(k for k, unit in enumerate(units.units) if unit == ("h0/attn",))
    set_recompute(m, units.segments(units.toggle(units.plans["full"], h0_attn)))
    assert [seg[0] for seg in segments_of(m)] == ["h0/attn", "h1/ln_1"]
    configs = megatron(m, 2, 2, tensor_parallel=2) if strategy == "megatron" else \
        random_strategy(m, 2, 7)
    tr = assert_matches(m, net.synthetic(0, 0), configs, num_devices=2,
                        optimizer=Adam(lr=0.01), rtol=1e-9, atol=1e-9)
    names = {launch.name for launch in tr.lowered.launches}
    assert {"h0/attn/recompute", "h1/mlp_fc/recompute"} <= names
    assert "h0/mlp_fc/recompute" not in names
