"""The shortcuts that make graph build and delta simulation fast keep results exact:
propagation resumed from a checkpoint, graph prefixes taken over by Planner.finish(), the
interference check's fast path, lazily hashed and shared Rects, and the paused GC."""
import gc
import random
import warnings

import pytest

from parallel_ops import SGD
from parallel_ops.lowering import IncrementalLowering
from strategy import delta
from strategy.costs import CostModel
from strategy.delta import SimulationSession
from strategy.machine_model import machine_model
from taskrt import R, RED, WD, IndexLaunch, Machine, Planner, Rect, Region, \
    RegionRequirement, plan
from taskrt.errors import PrivilegeError
from taskrt.gcpause import gc_paused
from taskrt.region import block_rect

from mpi.models import cnn, lstm_model, random_strategy

warnings.simplefilter("ignore")       # analytic-cost fallback warnings


@pytest.mark.parametrize("build", [cnn, lstm_model], ids=["cnn", "lstm"])
def test_resumed_propagation_equals_full_with_dense_checkpoints(build, monkeypatch):
    monkeypatch.setattr(delta, "CHECKPOINT_EVERY", 3)
    model = build()[0]
    mm = machine_model("p100:1")
    strategy = random_strategy(model, 4, 5)
    session = SimulationSession(model, mm, CostModel(), strategy)
    rng = random.Random(5)
    resumed = 0
    for k in range(8):
        op = rng.choice(model.ops)
        strategy[op.name] = random_strategy(model, 4, 50 + k)[op.name]
        got = session.change(op.name, strategy[op.name])
        resumed += session.planner.unchanged_nodes >= 3
        full = session.full()
        assert got.start == full.start and got.end == full.end, f"change {k}: {op.name}"
        assert got.busy == full.busy and got.memory == full.memory
        assert got.makespan == full.makespan
    assert resumed, "no change kept a prefix: the resume path was not exercised"


def test_finish_keeps_the_prefix_before_the_first_changed_launch():
    model = cnn()[0]
    machine = Machine.grid(4, 1)
    strategy = random_strategy(model, 4, 2)
    lowering = IncrementalLowering(model, strategy, machine, SGD(lr=0.1))
    low = lowering.lowered()
    planner = Planner(machine, initial=low.initial)
    for launch in low.launches:
        planner.add_launch(launch)
    before = planner.finish()
    old_nodes, old_preds = list(before.nodes), [list(p) for p in before.preds]
    last = model.ops[-1]
    part = lowering.change(last.name, random_strategy(model, 4, 9)[last.name])
    new = lowering.lowered()
    names = set(part.initial_forward) | set(part.initial_update)
    planner.replace(part.forward + part.backward + list(part.updates.values()),
                    {r: p for r, p in new.initial.items() if r.name in names})
    after = planner.finish()
    b = planner.unchanged_nodes
    assert 0 < b < len(after)
    assert all(after.nodes[i] is old_nodes[i] and after.preds[i] == old_preds[i]
               for i in range(b))
    fresh = plan(new.launches, machine, initial=new.initial)
    assert after.fingerprint() == fresh.fingerprint()
    assert after.succs == fresh.succs and after.launch_nodes == fresh.launch_nodes
    assert after.instance_rects == fresh.instance_rects
    assert after.final_valid == fresh.final_valid
    assert planner.finish().fingerprint() == fresh.fingerprint()   # nothing changed: same


def _launch(name, rects, privilege, replicas=False, devices=None):
    region = Region("a", (8, 8))
    return IndexLaunch(name, None, (len(rects),),
                       lambda c: (RegionRequirement(region, rects[c[0]], privilege),),
                       devices=devices or list(range(len(rects))), replicas=replicas)


def test_interference_fast_path_still_finds_conflicts():
    machine = Machine.grid(4, 1)
    grid = [block_rect((8, 8), (2, 2), c) for c in ((0, 0), (0, 1), (1, 0), (1, 1))]
    plan([_launch("grid", grid, WD)], machine)              # 2-d blocks: disjoint, fine
    overlap = [Rect((0, 0), (4, 8)), Rect((3, 0), (8, 8))]
    with pytest.raises(PrivilegeError, match=r"points \(0,\) \(WD\) and \(1,\) \(WD\)"):
        plan([_launch("halo-write", overlap, WD)], machine)
    plan([_launch("reads", overlap, R)], machine, initial={Region("a", (8, 8)):
                                                           [(Rect((0, 0), (8, 8)), 0)]})
    plan([_launch("sums", overlap, RED)], machine)
    whole = [Rect((0, 0), (8, 8))] * 2
    plan([_launch("replicas", whole, WD, replicas=True)], machine)
    with pytest.raises(PrivilegeError):                      # replicas on one device
        plan([_launch("same-device", whole, WD, replicas=True, devices=[1, 1])], machine)


def test_rect_hash_and_shared_whole_rects():
    r = Rect((1, 2), (3, 4))
    assert hash(r) == hash(((1, 2), (3, 4))) == hash(Rect((1, 2), (3, 4)))
    assert {r: 1}[Rect((1, 2), (3, 4))] == 1
    assert Rect.from_shape((2, 3)) is Rect.from_shape((2, 3)) == Rect((0, 0), (2, 3))
    with pytest.raises(AttributeError):
        r.lo = (0, 0)
    assert not Rect((0, 0), (0, 4)).overlaps(Rect((0, 0), (4, 4)))
    assert Rect((0, 0), (4, 4)).contains(Rect((2, 2), (2, 9)))     # empty: contained


def test_gc_paused_restores_the_collector_and_nests():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError):
        with gc_paused():
            raise ValueError("boom")
    assert gc.isenabled()
