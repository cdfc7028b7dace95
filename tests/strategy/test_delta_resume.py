"""Delta simulation's timeline resumes from the last run's checkpoints at the first launch a
change touched (strategy/listsched.py Checkpoints) and still equals full simulation exactly:
with a checkpoint every few nodes, so that the small models resume mid-graph, after random
changes and undos, with and without host costs (program order; ready order never resumes)."""
import random

import numpy as np
import pytest

import strategy.listsched as listsched
from strategy.costs import CostModel
from strategy.delta import SimulationSession
from strategy.machine_model import machine_model

from mpi.models import cnn, lstm_model, mlp, random_strategy
from tests.strategy.test_delta import app_model, p100_with_host


@pytest.fixture
def resumed(monkeypatch):
    """Checkpoints every 4 nodes; records each program-order run's `first`."""
    monkeypatch.setattr(listsched, "EVERY", 4)
    firsts = []
    original = listsched.list_schedule

    def spy(*args, **kwargs):
        if kwargs.get("checkpoints", args[8] if len(args) > 8 else None) is not None:
            firsts.append(kwargs.get("first", args[9] if len(args) > 9 else 0))
        return original(*args, **kwargs)
    monkeypatch.setattr("strategy.simulator.list_schedule", spy)
    return firsts


def check_resumed_equals_full(model, machine, changes, seed, firsts):
    rng = random.Random(seed)
    strategy = random_strategy(model, 4, seed)
    session = SimulationSession(model, machine, CostModel(), strategy)
    for k in range(changes):
        op = rng.choice(model.ops)
        config = random_strategy(model, 4, 1000 * seed + k)[op.name]
        got = session.change(op.name, config)
        if rng.random() < 0.3:
            got = session.undo()
        full = session.full()
        assert got.makespan == full.makespan, f"change {k}: {op.name}"
        assert np.array_equal(got.start, full.start) and np.array_equal(got.end, full.end)
        assert got.busy == full.busy and got.memory == full.memory
    assert any(f >= 8 for f in firsts), firsts       # resumed past a checkpoint


@pytest.mark.parametrize("build", [mlp, cnn, lstm_model], ids=["mlp", "cnn", "lstm"])
def test_resumed_timeline_equals_full(build, resumed):
    check_resumed_equals_full(build()[0], machine_model("p100:1"), 10, 7, resumed)


def test_resumed_timeline_equals_full_with_host_costs(resumed):
    check_resumed_equals_full(cnn()[0], p100_with_host(), 10, 8, resumed)


def test_resumed_timeline_equals_full_on_an_app(resumed):
    check_resumed_equals_full(app_model("inception"), machine_model("p100:1"), 4, 9, resumed)


def check_undo_puts_blocks_back(model, machine, changes, seed, firsts):
    """Every change is undone and followed by another: undo puts back the launch blocks,
    joined arrays and checkpoints of before (SimulationSession._blocks_back), so the next
    change rebuilds only its own launches and resumes at its own first one; every result
    equals a full simulation."""
    rng = random.Random(seed)
    session = SimulationSession(model, machine, CostModel(), random_strategy(model, 4, seed))
    put_back = 0
    for k in range(changes):
        op = rng.choice(model.ops)
        config = random_strategy(model, 4, 1000 * seed + k)[op.name]
        joined = session._joined
        got = session.change(op.name, config)
        full = session.full()
        assert got.makespan == full.makespan, f"change {k}: {op.name}"
        assert np.array_equal(got.start, full.start) and np.array_equal(got.end, full.end)
        assert got.busy == full.busy and got.memory == full.memory
        if rng.random() < 0.8:
            session.undo()
            put_back += session._joined is joined
    assert put_back >= changes // 2, put_back
    assert any(f >= 8 for f in firsts), firsts


@pytest.mark.parametrize("build", [mlp, cnn, lstm_model], ids=["mlp", "cnn", "lstm"])
def test_undo_puts_back_blocks_and_checkpoints(build, resumed):
    check_undo_puts_blocks_back(build()[0], machine_model("p100:1"), 16, 11, resumed)


def test_undo_puts_back_blocks_and_checkpoints_with_host_costs(resumed):
    check_undo_puts_blocks_back(cnn()[0], p100_with_host(), 16, 12, resumed)


def test_undo_puts_back_blocks_and_checkpoints_on_an_app(resumed):
    check_undo_puts_blocks_back(app_model("inception"), machine_model("p100:1"), 6, 13, resumed)


def test_resumed_times_are_all_written(resumed, monkeypatch):
    """A program-order run takes its times' arrays unzeroed (np.empty) and the host-less
    phases from arrays kept between runs: with every fresh np.empty array full of garbage
    (NaN, -7), resumed runs still equal full ones (each node's times written: copied from
    the last run before the checkpoint, by the loop after it), and the kept arrays stay
    zeros (the loop only reads them)."""
    real = np.empty

    def garbage(shape, dtype=float, *args, **kwargs):
        out = real(shape, dtype, *args, **kwargs)
        out.fill(np.nan if np.dtype(dtype).kind == "f" else -7)
        return out
    monkeypatch.setattr(np, "empty", garbage)
    check_resumed_equals_full(cnn()[0], machine_model("p100:1"), 10, 9, resumed)
    zeros, ptr = listsched._NO_HOST
    assert len(zeros) and not zeros.any() and not ptr.any()
