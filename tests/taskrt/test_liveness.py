"""Temporaries freed after their last use (taskrt.liveness): the executor's numerics do not
change, each temporary is allocated exactly from its first user to its last, the peak drops,
the measured peak equals the simulator's for the same (id) order, and reading a freed region
says how to keep it."""
import os
import random
import sys

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "mpi"))

from models import cnn, cnn_strategies, lstm_model, lstm_strategies  # noqa: E402
from oracle import reference_steps  # noqa: E402
from parallel_ops import SGD, Model  # noqa: E402
from strategy.simulator import memory_per_device  # noqa: E402
from taskrt import Machine  # noqa: E402
from taskrt.errors import ExecutionError, PlanError  # noqa: E402
from taskrt.liveness import Liveness, peak_bytes  # noqa: E402

CASES = [(cnn, cnn_strategies, s) for s in ("data_parallel", "attribute", "reduction",
                                             "random")] + \
        [(lstm_model, lstm_strategies, s) for s in ("data_parallel", "parameter", "random")]
IDS = [f"{b.__name__}-{s}" for b, _, s in CASES]


def compile_(build, strategies, name, **kw):
    model, feeds = build()
    return model, feeds, model.compile(Machine.local(4), strategies(4)[name],
                                       SGD(lr=0.1, momentum=0.9), **kw)


@pytest.mark.parametrize("build,strategies,name", CASES, ids=IDS)
def test_freeing_changes_no_numbers(build, strategies, name):
    model, feeds, freed = compile_(build, strategies, name)
    _, _, kept = compile_(build, strategies, name, keep="all")
    # keep='all' keeps every region; saved state (autograd's) is still freed by backward
    assert freed.executor.store.temporaries
    assert all(b.region is None for b in kept.executor.store.temporaries)
    for _ in range(3):                       # later steps reuse freed buffers (free list)
        assert freed.step(feeds) == kept.step(feeds)
    for w in model.weights:
        assert torch.equal(freed.weight(w.name), kept.weight(w.name)), w.name
    ref = reference_steps(build()[0], feeds, SGD(lr=0.1, momentum=0.9), steps=3)
    for w, value in ref[-1]["weights"].items():
        assert torch.allclose(freed.weight(w), value, rtol=1e-9, atol=1e-12), w


@pytest.mark.parametrize("build,strategies,name", CASES[:1] + CASES[-1:], ids=IDS[:1] + IDS[-1:])
def test_each_temporary_lives_from_its_first_user_to_its_last(build, strategies, name):
    _, feeds, tr = compile_(build, strategies, name)
    tr._feed(feeds)
    ex, store = tr.executor, tr.executor.store
    live = store.liveness
    first = {id(store.buffer(k)): u[0] for k, u in zip(live.keys, live.users)}
    last = {id(store.buffer(k)): u[-1] for k, u in zip(live.keys, live.users)}
    store.start_iteration()
    assert any(len(ids) > 1 for ids in ex.entries)      # the updates run as batches
    with torch.no_grad():                # LocalExecutor.run's loop, checked at every entry
        for ids, (step, allocate, free) in zip(ex.entries, ex.plan):
            store.begin(allocate)
            allocated = {id(b) for b in store.temporaries if b.tensor is not None}
            assert allocated == {k for k in first
                                 if first[k] <= ids[-1] and ids[0] <= last[k]}, ids
            step()
            store.release(free)
    assert all(b.tensor is None for b in store.temporaries)


def topological_order(graph, seed):
    """A random order of the nodes that respects every edge (as an MPI rank may run them)."""
    rng = random.Random(seed)
    waiting = [len(p) for p in graph.preds]
    ready = [i for i, w in enumerate(waiting) if w == 0]
    order = []
    while ready:
        i = ready.pop(rng.randrange(len(ready)))
        order.append(i)
        for s in graph.succs[i]:
            waiting[s] -= 1
            if waiting[s] == 0:
                ready.append(s)
    return order


@pytest.mark.parametrize("build,strategies,name", CASES[2:3] + CASES[-2:-1],
                         ids=IDS[2:3] + IDS[-2:-1])
def test_countdown_frees_correctly_in_any_order(build, strategies, name):
    model, feeds, tr = compile_(build, strategies, name)
    _, _, kept = compile_(build, strategies, name, keep="all")
    ex, store = tr.executor, tr.executor.store
    order = topological_order(tr.graph, seed=4)
    assert order != sorted(order)
    for _ in range(2):
        kept.step(feeds)
        tr._feed(feeds)
        model.step_count += 1
        tr.optimizer.step_count += 1
        store.start_iteration()
        with torch.no_grad():
            for i in order:
                used = store.node_temps.get(i, ())
                store.begin(used)
                assert all(b.tensor is not None for b in used), i
                ex.steps[i]()
                store.end(used)
        assert all(b.tensor is None for b in store.temporaries)
        assert tr.read(tr.lowered.loss_region.name).sum() == \
            kept.read(kept.lowered.loss_region.name).sum()
    for w in model.weights:
        assert torch.equal(tr.weight(w.name), kept.weight(w.name)), w.name


def chain(depth=8, width=64, batch=16):
    m = Model("chain", seed=0)
    h = m.input("x", (batch, width))
    y = m.input("y", (batch,), dtype="int64")
    for k in range(depth):
        h = m.relu(m.linear(h, width, name=f"fc{k}"), name=f"relu{k}")
    m.softmax_cross_entropy(m.linear(h, 10, name="out"), y, name="loss")
    g = torch.Generator().manual_seed(0)
    return m, {"x": torch.randn(batch, width, generator=g), "y": torch.randint(0, 10, (batch,))}


def test_peak_with_freeing_is_below_keeping_everything():
    model, feeds = chain()
    freed = model.compile(Machine.local(2), None, SGD(lr=0.1))
    kept = model.compile(Machine.local(2), None, SGD(lr=0.1), keep="all")
    freed.step(feeds), kept.step(feeds)
    f, k = freed.executor.store.bytes_per_device(), kept.executor.store.bytes_per_device()
    activations = 2 * 8 * 16 // 2 * 64 * 4        # fc and relu outputs of one device's half
    for d in (0, 1):
        assert f[d] < k[d] - activations, (f, k)
    # A second step reuses the freed buffers: the free list does not grow.
    held = freed.executor.store.free_list_bytes()
    freed.step(feeds)
    assert freed.executor.store.free_list_bytes() == held > 0


@pytest.mark.parametrize("build,strategies,name", CASES, ids=IDS)
def test_measured_peak_equals_the_simulated_peak_in_id_order(build, strategies, name):
    _, feeds, tr = compile_(build, strategies, name)
    predicted = tr.executor.store.bytes_per_device()      # before running: the id order's
    tr.step(feeds)
    measured = tr.executor.store.bytes_per_device()
    n = len(tr.graph.nodes)
    simulated = memory_per_device(tr.graph, list(range(n)), list(range(1, n + 1)))
    assert measured == simulated == predicted
    everything = memory_per_device(tr.graph, [0.0] * n, [1.0] * n, keep="all")
    assert all(simulated[d] < everything[d] for d in simulated)


def test_reading_a_freed_temporary_says_how_to_keep_it():
    model, feeds = chain(depth=2)
    tr = model.compile(Machine.local(2), None, SGD(lr=0.1))
    tr.step(feeds)
    with pytest.raises(ExecutionError, match=r"read 'relu0': it is a temporary, freed after "
                       r"its last use.*keep=\['relu0'\] \(or keep='all'\)"):
        tr.read("relu0")
    with pytest.raises(ExecutionError, match="relu1@grad"):
        tr.read("relu1@grad")
    # The loss, the logits it is computed from, weights and inputs stay readable.
    assert tr.read("out").shape == (16, 10) and tr.read("fc0.weight").shape == (64, 64)
    kept = model.compile(Machine.local(2), None, SGD(lr=0.1), keep=["relu0", "fc1.weight@grad"])
    kept.step(feeds)
    assert kept.read("relu0").shape == (16, 64) and kept.read("fc1.weight@grad").shape == (64, 64)
    with pytest.raises(PlanError, match=r"keep: regions \['nope'\] are not used by this graph"):
        model.compile(Machine.local(2), None, SGD(lr=0.1), keep=["nope"])


def test_peak_sweep_by_hand():
    # Node i runs from start[i] to end[i]; node 3 takes no time.
    start, end = [0.0, 1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 3.0]
    # Device 0: temp A (users 0, 1) lives 0..2, B (1, 2) 1..3, C (2, 3) 2..3: at t=2 A is
    # released before C is allocated, so the peak is B + C = 60 (not A + B + C = 70), plus
    # 100 B persistent. Device 1: D (user 0) 0..1.
    got = peak_bytes([0, 0, 0, 1], [10, 20, 40, 7], [[0, 1], [1, 2], [2, 3], [0]], start, end,
                     {0: 100})
    assert got == {0: 160, 1: 7}
    # A temporary whose only user takes no time counts at that instant, after the releases.
    assert peak_bytes([0, 0], [20, 40], [[1, 2], [3]], start, end, {}) == {0: 40}
    assert peak_bytes([0, 0], [20, 40], [[1, 3], [3]], start, end, {}) == {0: 60}


def test_liveness_keeps_initial_data_and_results():
    model, _ = chain(depth=2)
    tr = model.compile(Machine.local(2), None, SGD(lr=0.1))
    live = Liveness.of(tr.graph)
    names = {k[1] for k in live.keys}
    assert {"fc0", "relu0", "relu1@grad", "fc0.weight@grad"} <= names
    assert not names & {"x", "y", "fc0.weight", "loss", "out"}
    assert {"loss", "out", "x", "fc0.weight"} <= live.kept
    assert np.all([u == sorted(u) for u in live.users])


def test_small_buffers_stay_allocated_in_the_executor_and_in_the_simulator(monkeypatch):
    model, feeds = chain()
    n_all = model.compile(Machine.local(2), None, SGD(lr=0.1))
    everything = len(n_all.executor.store.temporaries)
    sizes = sorted(b.nbytes for b in n_all.executor.store.temporaries)
    cut = sizes[len(sizes) // 2]                  # half of the temporaries are below this
    monkeypatch.setenv("TASKRT_MIN_TEMPORARY_BYTES", str(cut))   # read when used
    tr = model.compile(Machine.local(2), None, SGD(lr=0.1))
    temps = tr.executor.store.temporaries
    assert 0 < len(temps) < everything and all(b.nbytes >= cut for b in temps)
    tr.step(feeds)
    measured = tr.executor.store.bytes_per_device()
    n = len(tr.graph.nodes)
    simulated = memory_per_device(tr.graph, list(range(n)), list(range(1, n + 1)))
    assert measured == simulated
    # In delta simulation too (the session collects its memory model region by region).
    from strategy.delta import SimulationSession
    from strategy.machines import machine_model
    from strategy.costs import CostModel
    mm = machine_model("p100:1")
    session = SimulationSession(model, mm, CostModel(), None, SGD(lr=0.1))
    assert session.result.memory == session.full().memory
