"""Operators' saved state in the memory model (parallel_ops/saved_state.py, kind STATE in
taskrt/liveness.py): attention's bytes against a hand count, the meta-tensor count against
the same forward on CPU tensors, the simulator and the executor against a peak measured in
a real CPU run (what autograd and forward_saving really hold, found with saved-tensor
hooks), recomputation dropping the state, and delta simulation equal to full with it."""
from __future__ import annotations

import argparse

import pytest
import torch

from apps.gpt import build
from parallel_ops import SGD, Adam, Model
from parallel_ops.saved_state import saved_bytes
from parallel_ops.tasks import _Explicit
from strategy.experts import megatron
from strategy.simulator import memory_per_device
from taskrt import Machine
from taskrt.liveness import STATE, Liveness
from taskrt.taskgraph import TASK

B, S, E, H = 2, 8, 16, 4              # batch, sequence, width, heads: head size 4


def attention(dtype: str, causal: bool):
    m = Model("attn", seed=0, dtype=dtype)
    m.multihead_attention(m.input("x", (B, S, E)), H, causal=causal, name="attn")
    return m.op("attn")


def hand_count(dtype: str, causal: bool, degrees, color) -> int:
    """What forward keeps, tensor by tensor, for a part of n samples, hp heads, queries
    [s0, s1) and K keys: the copies matmul makes of q (n hp L hd), k^T and v (n hp K hd)
    for its batched products, the probabilities (n hp L K), the context (n L hp hd) for
    out_proj; with a causal mask the mask (L K bools); and when the query rows are not
    contiguous in the part's input (n > 1 and not all its rows), the copy of them that
    in_proj's linear makes (n L E)."""
    b = torch.empty(0, dtype=getattr(torch, dtype)).element_size()
    (dn, ds, dh), (cn, cs, ch) = degrees, color
    n, hp, hd = B // dn, H // dh, E // H
    s0, s1 = S // ds * cs, S // ds * (cs + 1)
    L = s1 - s0
    K = s1 if causal else S
    elements = n * hp * L * hd + 2 * n * hp * K * hd + n * hp * L * K + n * L * hp * hd
    if n > 1 and L < K:
        elements += n * L * E
    return b * elements + (L * K if causal else 0)


PARTS = [((1, 1, 1), (0, 0, 0)), ((1, 2, 1), (0, 1, 0)), ((1, 2, 1), (0, 0, 0)),
         ((1, 1, 2), (0, 0, 1)), ((2, 2, 2), (1, 1, 1)), ((1, 4, 1), (0, 3, 0))]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("degrees,color", PARTS)
def test_attention_bytes_by_hand(dtype, causal, degrees, color):
    op = attention(dtype, causal)
    spec = op.part(degrees, color)
    grads = (True,), (True,) * 4
    want = hand_count(dtype, causal, degrees, color)
    assert saved_bytes(op, spec, *grads) == want                    # on meta tensors
    assert saved_bytes(op, spec, *grads, device="cpu") == want      # on real ones


def gpt(dtype="float64", recompute="none", layers=None):
    a = argparse.Namespace(small=True, config=None, seed=0, dtype=dtype, batch_size=4,
                           vocab=None, width=None, heads=None, layers=layers, seq_len=None,
                           recompute=recompute)
    return build(a)


def test_meta_count_equals_cpu_for_every_gpt_stage():
    """Every stage of the small GPT under every degree (one part each), float32: the meta
    count is what the same forward keeps on CPU tensors. (bfloat16 differs in one place:
    the CPU layer norm keeps its mean and 1/std in bfloat16, meta and CUDA in float32.)"""
    from oracle import legal_configs
    model = gpt("float32", layers=1).model
    checked = 0
    for op in model.ops:
        for cfg in legal_configs(op, 4, max_configs=6):
            degrees = tuple(dict(cfg.degrees).get(d.name, 1) for d in op.dims)
            for stage in op.stages():
                grads = (tuple(t.requires_grad for t in stage.inputs),
                         tuple(w.requires_grad for w in stage.weights))
                for color in ((0,) * len(degrees), tuple(g - 1 for g in degrees)):
                    spec = stage.part(degrees, color)
                    assert saved_bytes(stage, spec, *grads) == \
                        saved_bytes(stage, spec, *grads, device="cpu"), (stage.name, degrees)
                    checked += 1
    assert checked > 100


def _flat(x):
    if isinstance(x, (tuple, list)):
        return [y for item in x for y in _flat(item)]
    return [x]


def measured_peak(trainer, feeds) -> dict[int, int]:
    """Peak bytes per device of one LocalExecutor step, measured: the store's instances,
    partial sums and staging buffers live at each node, plus the storages the task contexts
    really hold for backward (autograd's saved tensors, seen by saved-tensor hooks, or
    forward_saving's tuple) that are not region buffers. The store's count of declared
    saved state is left out: this measures what the declaration claims."""
    ex = trainer.executor
    store, nodes = ex.store, trainer.graph.nodes
    owners = next(iter(store.instances.values())).owners   # storage address -> Buffer
    packed: dict = {}                   # context key -> tensors autograd saved in it
    current = [None]
    peak: dict[int, int] = {}

    def pack(t):
        if current[0] is not None:
            packed.setdefault(current[0], []).append(t)
        return t

    def sample():
        held = {}
        for key, ctx in ex.contexts.items():
            s = ctx.saved
            if s is None:
                continue
            for t in (_flat(s.saved) if type(s) is _Explicit else packed.get(key, ())):
                if isinstance(t, torch.Tensor) and t.numel():
                    st = t.untyped_storage()
                    if st.data_ptr() not in owners:
                        held[ctx.device, st.data_ptr()] = st.nbytes()
        for d, live in store.live.items():
            declared = sum(s.nbytes for s in store.states.values()
                           if s.device == d and s.tensor is not None)
            real = sum(n for (dev, _), n in held.items() if dev == d)
            peak[d] = max(peak.get(d, 0), live - declared + real)

    def wrapped(step, node):
        key = (node.launch.name, node.color) if node.kind is TASK else None

        def run():
            sample()                    # after the store allocated the node's buffers
            current[0] = key
            if key is not None:
                packed[key] = []
            step()
            current[0] = None
            sample()                    # before it releases those it used last
        return run
    ex.plan = [(wrapped(step, nodes[ids[0]]), alloc, free)
               for ids, (step, alloc, free) in zip(ex.entries, ex.plan)]
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        trainer.step(feeds)
    return peak


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize("devices", [1, 2])
def test_measured_peak_equals_the_model(monkeypatch, recompute, devices):
    """Fails without saved state in the model: attention's probabilities, q, k, v and
    context, and mlp_fc's pre-GELU activation are held between forward and backward."""
    monkeypatch.setenv("TASKRT_MIN_TEMPORARY_BYTES", "0")      # every buffer a temporary
    net = gpt(recompute=recompute)
    strategy = {} if devices == 1 else megatron(net.model, 2, 2, tensor_parallel=2)
    tr = net.model.compile(Machine.local(devices), strategy, Adam(), executor="local")
    feeds = net.synthetic(0, 0)
    measured = measured_peak(tr, feeds)
    n = len(tr.graph.nodes)
    model = memory_per_device(tr.graph, list(range(n)), list(range(1, n + 1)))
    assert measured == model
    assert tr.executor.store.bytes_per_device() == model


def test_state_lives_from_forward_to_backward_and_recompute_drops_it(monkeypatch):
    monkeypatch.setenv("TASKRT_MIN_TEMPORARY_BYTES", "0")
    spans = {}
    for recompute in ("none", "selective"):
        tr = gpt(recompute=recompute).model.compile(Machine.local(1), {}, SGD(lr=0.1),
                                                    executor="local")
        g = tr.graph
        live = Liveness.of(g)
        states = {k[1]: [g.nodes[i].launch.name for i in u]
                  for k, u in zip(live.keys, live.users) if k[0] == STATE}
        spans[recompute] = states
    # kept by the forward, taken by the backward; recomputed: by the recompute launch
    assert spans["none"]["h0/attn/fwd@state"] == ["h0/attn/fwd", "h0/attn/bwd"]
    assert "h0/attn/fwd@state" not in spans["selective"]
    assert spans["selective"]["h0/attn/recompute@state"] == ["h0/attn/recompute",
                                                            "h0/attn/bwd"]
    assert spans["selective"]["h0/mlp_fc/fwd@state"] == ["h0/mlp_fc/fwd", "h0/mlp_fc/bwd"]


def test_attention_state_in_the_simulated_peak_by_hand(monkeypatch):
    """One attention layer on one device: the state buffer of its forward is the hand
    count of its whole (one part) and the bytes the model holds from it to its backward."""
    monkeypatch.setenv("TASKRT_MIN_TEMPORARY_BYTES", "0")
    m = Model("one", seed=0, dtype="float32")
    y = m.multihead_attention(m.input("x", (B, S, E)), H, causal=True, name="attn")
    m.softmax_cross_entropy(y, m.input("y", (B, S), dtype="int64"), name="loss")
    tr = m.compile(Machine.local(1), {}, SGD(lr=0.1), executor="local")
    live = Liveness.of(tr.graph)
    state = [nb for k, nb in zip(live.keys, live.nbytes) if k[0] == STATE]
    assert state == [hand_count("float32", True, (1, 1, 1), (0, 0, 0))]


def test_delta_equals_full_with_saved_state():
    import random
    import warnings

    import numpy as np

    from strategy.costs import CostModel
    from strategy.delta import SimulationSession
    from strategy.machine_model import machine_model
    from mpi.models import random_strategy
    warnings.simplefilter("ignore")
    for recompute in ("none", "selective"):
        model = gpt("bfloat16", recompute=recompute).model
        mm = machine_model("p100:1")
        strategy = random_strategy(model, 4, 5)
        session = SimulationSession(model, mm, CostModel(), strategy)
        assert any(k[0] == STATE for k in session._buffers.ids)
        rng = random.Random(5)
        ops = [op for op in model.ops if op.type in ("multihead_attention", "linear",
                                                     "layernorm")]
        for k in range(5):
            op = rng.choice(ops)
            strategy[op.name] = random_strategy(model, 4, 100 + k)[op.name]
            got = session.change(op.name, strategy[op.name])
            full = session.full()
            assert got.memory == full.memory, (recompute, k, op.name)
            assert np.array_equal(got.end, full.end)


@pytest.mark.parametrize("with_state", [False, True])
def test_lstm_steps_share_their_measure_and_equal_cpu(with_state):
    """Every step's saved bytes are what the same forward keeps on CPU tensors, step by
    step: declared (lstm._step_saved_bytes) when the weights want gradients, nothing
    measured; measured otherwise, where the steps keep state by their kind (first, middle,
    last; Op.state_info), so a search measures 3 parts of a 6-step layer, not 6."""
    import parallel_ops.lstm  # noqa: F401  (attaches model.lstm)
    from parallel_ops import saved_state
    m = Model("lstm", seed=1, dtype="float32")
    x = m.input("x", (4, 6, 8), requires_grad=True)
    state = [(m.input("h0", (4, 5)), m.input("c0", (4, 5)))] if with_state else None
    m.lstm(x, 5, state=state, name="rnn")
    op = m.op("rnn")
    for weights_learn in (True, False):
        saved_state._CACHE.clear()
        for degrees in ((1, 1), (2, 1), (1, 5)):
            for stage in op.stages():
                grads = (tuple(t.requires_grad for t in stage.inputs),
                         tuple(weights_learn for _ in stage.weights))
                spec = stage.part(degrees, (0, 0))
                assert saved_bytes(stage, spec, *grads) == \
                    saved_bytes(stage, spec, *grads, device="cpu"), (stage.name, degrees)
        assert len(saved_state._CACHE) == (0 if weights_learn else 3 * 3)
