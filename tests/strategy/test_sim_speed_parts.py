"""The shortcuts that make graph build and delta simulation fast keep results exact:
the compiled list scheduler (equal to the Python loop it replaced, bit for bit), node groups
that a change does not touch kept as they are, the interference check's fast path, lazily
hashed and shared Rects, and the paused GC."""
import gc
import os
import random
import sys
import warnings

import pytest

from parallel_ops import SGD, Model
from parallel_ops.lowering import IncrementalLowering
from strategy.costs import CostModel
from strategy.delta import SimulationSession
from strategy.machine_model import machine_model
from strategy.simulator import ROUTE, resource_name
from taskrt import R, RED, RW, WD, IndexLaunch, Machine, Planner, Rect, Region, \
    RegionRequirement, plan
from taskrt.errors import PrivilegeError
from taskrt.gcpause import gc_paused
from taskrt.region import block_rect

from mpi.models import cnn, lstm_model, random_strategy

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from interference_oracle import check_as_oracle_says  # noqa: E402
from sim_graphs import hold  # noqa: E402

warnings.simplefilter("ignore")       # analytic-cost fallback warnings


def python_schedule(graph, timer):
    """The list scheduler as the Python loop it was before strategy/listsched.py (kept as the
    oracle): FIFO per resource in program order (sim_graphs.hold)."""
    n = len(graph.nodes)
    start, end, free, busy = [0.0] * n, [0.0] * n, {}, {}
    for node in graph.nodes:
        i = node.id
        dur, resources = timer.timing(node)
        t = 0.0
        for p in graph.preds[i]:
            if end[p] > t:
                t = end[p]
        t, e = hold(free, resources, t, dur)
        for r in resources:
            busy[r] = busy.get(r, 0.0) + dur
        start[i], end[i] = t, e
    return start, end, {resource_name(r): v for r, v in busy.items() if r is not ROUTE}


@pytest.mark.parametrize("build", [cnn, lstm_model], ids=["cnn", "lstm"])
def test_compiled_schedule_equals_the_python_loop_bit_for_bit(build):
    model = build()[0]
    for gpus, preset in ((4, "p100:1"), (8, "p100:2")):
        mm = machine_model(preset)
        for seed in range(6):
            session = SimulationSession(model, mm, CostModel(), random_strategy(model, gpus, seed))
            start, end, busy = python_schedule(session.graph, session.timer)
            assert list(session.result.start) == start and list(session.result.end) == end
            assert session.result.busy == busy
            assert session.result.makespan == max(end)


def test_a_change_rebuilds_only_the_groups_of_launches_using_touched_regions():
    model = cnn()[0]
    machine = Machine.grid(4, 1)
    lowering = IncrementalLowering(model, random_strategy(model, 4, 2), machine, SGD(lr=0.1))
    low = lowering.lowered()
    planner = Planner(machine, initial=low.initial)
    for launch in low.launches:
        planner.add_launch(launch)
    before = {g.key: g for g in planner.groups()}
    rng = random.Random(4)
    for k in range(6):
        op = rng.choice(model.ops)
        part = lowering.change(op.name, random_strategy(model, 4, 90 + k)[op.name])
        new = lowering.lowered()
        names = set(part.initial_forward) | set(part.initial_update)
        touched = planner.replace(part.forward + part.backward + list(part.updates.values()),
                                  {r: p for r, p in new.initial.items() if r.name in names})
        users = {li for name in touched for li, _, _ in planner.log.get(name, ())}
        after = planner.groups()
        for g in after:
            if g.key[0] not in users:
                assert before.get(g.key) is g, f"change {k}: {g.key} rebuilt needlessly"
        assert any(g.key[0] in users for g in after)
        fresh = plan(new.launches, machine, initial=new.initial)
        got = planner.finish()
        assert got.fingerprint() == fresh.fingerprint(), f"change {k}: {op.name}"
        assert got.succs == fresh.succs and got.launch_nodes == fresh.launch_nodes
        assert got.instance_rects == fresh.instance_rects
        assert got.final_valid == fresh.final_valid
        before = {g.key: g for g in after}


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


@pytest.mark.parametrize("seed", range(300))
def test_interference_fast_paths_equal_the_rule_pair_by_pair(seed):
    """Random launches of replicated parts (Megatron's weights: t shards, each written by
    its replicas), overlapping and empty rects, mixed privileges, a point on two devices or
    twice on one."""
    rng = random.Random(seed)
    region = Region("a", (8, 8))
    parts = [block_rect((8, 8), (2, 2), c) for c in ((0, 0), (0, 1), (1, 0), (1, 1))] + \
        [Rect((0, 0), (4, 8)), Rect((2, 2), (2, 6)), Rect((3, 0), (8, 4))]
    shards = rng.randint(1, 4)
    chosen = rng.sample(parts[:4], shards) if rng.random() < 0.7 else \
        [rng.choice(parts) for _ in range(shards)]
    privilege = {r: rng.choice([WD, WD, RW, R, RED]) for r in chosen}
    points = []
    for k in range(rng.randint(1, 10)):
        rect = rng.choice(chosen)
        p = privilege[rect] if rng.random() < 0.9 else rng.choice([WD, RW, R, RED])
        color = (k if rng.random() < 0.8 else rng.randrange(k + 1),)
        device = k if rng.random() < 0.8 else rng.randrange(4)
        reqs = (RegionRequirement(region, rect, p),)
        if rng.random() < 0.1:
            reqs += (RegionRequirement(region, rng.choice(parts), rng.choice([WD, R, RED])),)
        points.append((color, device, reqs))
    replicas = rng.random() < 0.7
    check_as_oracle_says(points, replicas)


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


def test_a_session_built_outside_a_search_leaves_no_young_objects():
    """A session's lowering, plan and arrays live as long as it does. Built outside a search
    (the exhaustive check, explain, the benchmarks; a search freezes the heap after each
    build), the young-generation collections right after its build walked all of them
    (Inception-v3 @16: ~0.5 of a 1.5 s build): its pause ends with them in the oldest
    generation (gc_paused(long_lived=True))."""
    model = cnn()[0]
    gc.collect()
    young = gc.get_stats()[0]["collections"]
    session = SimulationSession(model, machine_model("p100:1"), CostModel(),
                                random_strategy(model, 4, 1))
    more = [[k] for k in range(100)]        # allocations, as the caller's next lines make
    assert gc.get_stats()[0]["collections"] == young and gc.get_count()[0] < 700
    assert gc.isenabled() and session.result.makespan > 0 and len(more) == 100


def test_requirement_bounds_check_equals_the_region_rect_containment():
    """RegionRequirement checks `rect` inside its region without making the region's rect;
    the oracle is Rect.contains (random rects, some outside, empty, or of another rank)."""
    rng = random.Random(7)
    region = Region("a", (5, 3, 4))
    for _ in range(3000):
        nd = rng.choice((3, 3, 3, 2))
        lo = tuple(rng.randint(-2, 6) for _ in range(nd))
        hi = tuple(rng.randint(-2, 7) for _ in range(nd))
        rect = Rect(lo, hi)
        inside = nd == 3 and region.rect.contains(rect)
        if inside:
            assert RegionRequirement(region, rect, R).rect is rect
        else:
            with pytest.raises(PrivilegeError, match=r"Requirement on 'a': rect .* is not "
                                                     r"inside the region \[0:5,0:3,0:4\]"):
                RegionRequirement(region, rect, R)
    scalar = Region("s", ())
    assert RegionRequirement(scalar, Rect((), ()), WD).rect == scalar.rect


def test_whole_tensor_parts_share_one_rect():
    """A rect covering a whole tensor (a replicated weight's, an unsplit input's) is the
    shared Rect.from_shape: every point of a launch holds the same object."""
    m = Model("mlp")
    m.linear(m.input("x", (8, 6)), 4, name="fc")
    fc = m.ops[-1]
    specs = [fc.part((4, 1, 1), (i, 0, 0)) for i in range(4)]         # split on the batch
    for k, w in enumerate(fc.weights):
        assert all(s.weights[k] is Rect.from_shape(w.shape) for s in specs)
    assert len({id(s.inputs[0]) for s in specs}) == 4
    split = fc.part((1, 2, 1), (0, 1, 0))                             # on the outputs
    assert split.weights[0] == Rect((2, 0), (4, 6))
    assert split.inputs[0] is Rect.from_shape((8, 6))


def test_simulate_and_predicts_lowering_run_with_the_collector_paused(monkeypatch):
    """simulate() and --simulate's lowering allocate objects per node that all stay alive;
    with the collector on, each full collection walks the whole graph (taskrt/gcpause.py)."""
    from apps import simulate as app_simulate
    from apps.alexnet import APP as CNN
    from apps.startup import optimizer, setup
    from parallel_ops import lowering
    model = cnn()[0]
    mm = machine_model("p100:1")
    seen = []

    class Recording(CostModel):
        def task_time(self, node, spec):
            seen.append(gc.isenabled())
            return super().task_time(node, spec)
    session = SimulationSession(model, mm, Recording(), random_strategy(model, 4, 1))
    seen.clear()
    from strategy.simulator import simulate
    simulate(session.graph, mm, Recording())
    assert seen and not any(seen) and gc.isenabled()
    lowered_with = []
    real_lower = lowering.lower

    def lower(*a, **k):
        lowered_with.append(gc.isenabled())
        return real_lower(*a, **k)
    monkeypatch.setattr(app_simulate, "lower", lower)
    s = setup(CNN, ["--small", "--simulate", "--machine", "p100:1"])
    p = app_simulate.predict(CNN, s, optimizer(s.config))
    assert lowered_with == [False] and gc.isenabled()
    # Its graph lives on: it went straight to the oldest generation (gc_paused(long_lived)).
    assert any(o is p.graph.nodes[-1] for o in gc.get_objects(generation=2))


def test_long_lived_pause_moves_survivors_to_the_oldest_generation():
    class Thing:
        pass
    for long_lived in (False, True):
        with gc_paused(long_lived=long_lived):
            thing = Thing()
        old = any(o is thing for o in gc.get_objects(generation=2))
        assert old == long_lived and gc.isenabled()     # else young (0, or 1 if collected)
