"""The session's joined arrays (strategy/launchblocks.py Joined: joined straight from every
group, or spliced where launches changed) against the old way as the oracle: each launch's
groups joined into a block (nodegroups.GroupRun and its GroupSims' arrays), the blocks
joined in program order, every field's length per block. After random changes and undos,
with splicing always, never and as the session decides, with and without host costs."""
import random

import numpy as np
import pytest

import strategy.delta as delta
from strategy.costs import CostModel
from strategy.delta import SimulationSession
from strategy.launchblocks import MEMORY_ARRAYS, RUN_ARRAYS, SIM_ARRAYS, Joined
from strategy.machine_model import machine_model
from strategy.taskgroups import HOST_ARRAYS
from taskrt.nodegroups import GroupRun, join

from mpi.models import cnn, lstm_model, mlp, random_strategy
from tests.strategy.test_delta import p100_with_host


def block_arrays(block, host: bool) -> dict:
    """One launch block's arrays, joined per block (the code before launchblocks.py)."""
    run = GroupRun.of(block.groups)
    out = {f: join([getattr(s, f) for s in block.sims]) for f in SIM_ARRAYS}
    out.update((f, getattr(run, f)) for f in RUN_ARRAYS)
    if host:
        out.update((f, join([s.host[k] for s in block.sims]))
                   for k, f in enumerate(HOST_ARRAYS))
    return out


def check_joined(session) -> None:
    host = session.timer.host_costs
    per_block = [block_arrays(b, host) for b in session._blocks]
    joined = session._joined
    fields = SIM_ARRAYS + RUN_ARRAYS + (HOST_ARRAYS if host else ())
    assert set(joined.arrays) | set(MEMORY_ARRAYS) == set(fields)   # (those: on first use)
    for f in fields:
        want = np.concatenate([b[f] for b in per_block])
        got = joined.arrays[f]
        assert got.dtype == want.dtype, f
        assert np.array_equal(got, want), f
        assert list(joined.lens_of(f)) == [len(b[f]) for b in per_block], f


@pytest.mark.parametrize("share", [0.0, 1.0, 0.25], ids=["never", "always", "default"])
@pytest.mark.parametrize("build,host", [(mlp, False), (cnn, True), (lstm_model, False),
                                        (cnn, False)], ids=["mlp", "cnn-host", "lstm", "cnn"])
def test_joined_arrays_equal_per_block_joins(build, host, share, monkeypatch):
    monkeypatch.setattr(delta, "SPLICE_SHARE", share)
    splices = []
    original = Joined.spliced

    def spy(self, blocks, changed):
        splices.append(len(changed))
        return original(self, blocks, changed)
    monkeypatch.setattr(Joined, "spliced", spy)
    model = build()[0]
    machine = p100_with_host() if host else machine_model("p100:1")
    rng = random.Random(7)
    session = SimulationSession(model, machine, CostModel(), random_strategy(model, 4, 7))
    check_joined(session)
    for k in range(24):
        op = rng.choice(model.ops)
        ops = [op] + ([rng.choice([o for o in model.ops if o is not op])]
                      if rng.random() < 0.3 else [])
        changes = [(o.name, random_strategy(model, 4, 100 + k)[o.name]) for o in ops]
        if rng.random() < 0.5:      # timed: the memory arrays not joined until asked for
            session.change_timed(changes)
            check_joined(session)
            got = session.complete()
        else:
            got = session.change_all(changes)
        check_joined(session)
        full = session.full()
        assert got.makespan == full.makespan and np.array_equal(got.end, full.end)
        if rng.random() < 0.7:
            session.undo()
            check_joined(session)
    assert (len(splices) > 10) if share == 1.0 else (not splices) if share == 0.0 else True


@pytest.mark.parametrize("build", [mlp, cnn, lstm_model], ids=["mlp", "cnn", "lstm"])
def test_spliced_joins_its_memory_arrays_from_its_own_blocks(build):
    """A Joined made without its memory arrays and spliced: they are joined, when asked
    for, from the blocks it was spliced with, not those it was made from."""
    model = build()[0]
    rng = random.Random(11)
    session = SimulationSession(model, machine_model("p100:1"), CostModel(),
                                random_strategy(model, 4, 11))
    fields = SIM_ARRAYS + RUN_ARRAYS
    spliced = 0
    for k in range(12):
        before = list(session._blocks)
        lazy = Joined(before, fields)
        op = rng.choice(model.ops)
        session.change(op.name, random_strategy(model, 4, 200 + k)[op.name])
        after = session._blocks
        changed = [i for i, (a, b) in enumerate(zip(before, after)) if a is not b]
        if len(after) != len(before) or not changed:
            continue
        got = lazy.spliced(after, changed)
        per_block = [block_arrays(b, False) for b in after]
        for f in MEMORY_ARRAYS:
            assert np.array_equal(got.arrays[f], np.concatenate([b[f] for b in per_block])), f
            assert list(got.lens_of(f)) == [len(b[f]) for b in per_block], f
        spliced += any(not np.array_equal(lazy.arrays[f], got.arrays[f])
                       for f in MEMORY_ARRAYS)
    assert spliced, "some change should have changed the memory arrays"


@pytest.mark.parametrize("build", [mlp, cnn, lstm_model], ids=["mlp", "cnn", "lstm"])
def test_timed_change_splices_memory_arrays_only_when_asked(build, monkeypatch):
    """A timed change splices the time's arrays but not the memory arrays (most are undone
    before their peak); complete() splices those from the Joined of before, which then
    holds on to no Joined of before (no chain kept alive from change to change)."""
    monkeypatch.setattr(delta, "SPLICE_SHARE", 1.0)
    model = build()[0]
    rng = random.Random(5)
    session = SimulationSession(model, machine_model("p100:1"), CostModel(),
                                random_strategy(model, 4, 5))
    lazy = 0
    for k in range(16):
        op = rng.choice(model.ops)
        before = session._joined
        had = all(f in before.arrays for f in MEMORY_ARRAYS)      # (not via __missing__)
        session.change_timed([(op.name, random_strategy(model, 4, 300 + k)[op.name])])
        joined = session._joined
        if joined is not before and had:
            lazy += 1
            assert not any(f in joined.arrays for f in MEMORY_ARRAYS)
            assert joined.arrays.base is before
        if k % 2:
            session.undo()
            continue
        session.complete()
        check_joined(session)
        assert getattr(session._joined.arrays, "base", None) is None
    assert lazy, "some timed change should have spliced"
