"""Regions re-planned slab by slab (taskrt/slabplans.py) get exactly the graphs of planning
them whole.

Random sequence programs in the shape of an LSTM stack: per time step a launch of each
operator, each operator with its own partition of a step's (batch x hidden) slice and its own
devices (replicated readers included, so copies have several possible sources and the
region's sent counts decide), a recurrence (step t reads step t-1's slice of the same
region), gradients summed by two operators and read back, an input read again by the
backward on other devices (so a slab's source choice can differ from its class's after
earlier choices). A replannable planner gets the
program, then one operator's launches are replaced by another config (replace, region plans
not remembered) and undone; the graphs (golden digest: nodes, edges, Red+ targets, reduce
inputs, buffers in order, valid pieces, pending sums) are compared with
`slabplans.SLAB_PLANS` on and off, and slab plans must have been used.
"""
from __future__ import annotations

import random
from collections import Counter

import pytest

from taskrt import (R, RED, WD, IndexLaunch, Machine, Planner, Rect, Region, RegionRequirement,
                    block_rect)
from taskrt import regionplans, slabplans
from taskrt.regionmemo import RegionPlanMemo

from test_graph_golden import digest

MACHINE = Machine.grid(2, 2)
NDEV = 4
STEPS = 7
SHAPE = (8, 6)                                        # a step's batch x hidden
X = Region("x", (STEPS, 8, 6), "float32")             # operator 0's output, all steps
H = Region("h", (STEPS, 8, 6), "float32")             # operator 1's output (recurrent)
GX = Region("gx", (STEPS, 8, 6), "float32")           # their gradients
GH = Region("gh", (STEPS, 8, 6), "float32")


def noop(ctx, *views):
    return None


def _config(rng):
    """(part rects of a step's slice, per part its devices): a block partition, its parts on
    random devices, some parts' reads also made by one to three other devices (replicas)."""
    degrees = rng.choice(((1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (1, 3), (2, 3)))
    colors = [(i, j) for i in range(degrees[0]) for j in range(degrees[1])]
    rects = [block_rect(SHAPE, degrees, c) for c in colors]
    devices = [rng.randrange(NDEV) if rng.random() < 0.3 else k % NDEV
               for k in range(len(rects))]
    return rects, devices, rng.choice((0, 0, 1, 2, 3))


def _at(rect, t):
    return Rect((t,) + rect.lo, (t + 1,) + rect.hi)


def _operator(op: int, cfg):
    """Operator `op`'s launches under config `cfg` (names fixed by operator and step)."""
    rects, devices, replicated = cfg
    launches = []

    def launch(name, reqs_of, shift=0):
        table, devs = [], []
        for r, d in zip(rects, devices):
            table.append(tuple(reqs_of(r)))
            devs.append((d + shift) % NDEV)
            if replicated and all(q.privilege is R for q in table[-1]):
                for k in range(1, replicated + 1):
                    table.append(table[-1])
                    devs.append((d + k) % NDEV)
        launches.append(IndexLaunch(name, noop, (len(table),),
                                    lambda c, table=table: table[c[0]], devices=devs))

    for t in range(STEPS):
        if op == 0:         # writes x[t]
            launch(f"op0/s{t}/fwd", lambda r: [RegionRequirement(X, _at(r, t), WD)])
        else:               # reads x[t] and h[t-1], writes h[t]
            launch(f"op1/s{t}/fwd", lambda r: [RegionRequirement(X, _at(r, t), R)] +
                   ([RegionRequirement(H, _at(r, t - 1), R)] if t else []) +
                   [RegionRequirement(H, _at(r, t), WD)])
    for t in reversed(range(STEPS)):
        if op == 1:         # on the next devices: reads gh[t] (summed) and x[t] again,
            # sums into gx[t] and gh[t-1]
            launch(f"op1/s{t}/bwd", lambda r: [RegionRequirement(GH, _at(r, t), R),
                                               RegionRequirement(X, _at(r, t), R)] +
                   ([RegionRequirement(GH, _at(r, t - 1), RED)] if t else []) +
                   [RegionRequirement(GX, _at(r, t), RED)], 1)
        else:               # reads gx[t]
            launch(f"op0/s{t}/bwd", lambda r: [RegionRequirement(GX, _at(r, t), R)])
    return launches


def _program(configs):
    """Operator 0's forward, operator 1's, a loss seeding gh, then the backwards."""
    op0, op1 = _operator(0, configs[0]), _operator(1, configs[1])
    loss = IndexLaunch("loss", noop, (NDEV,), lambda c: (RegionRequirement(
        GH, Rect((0, 0, 0), (STEPS, 8, 6)), RED),), devices=list(range(NDEV)))
    return op0[:STEPS] + op1[:STEPS] + [loss] + op1[STEPS:] + op0[STEPS:]


def _state(p):
    """The graph's digest, and per region its buffers' devices in the order met (the order
    the simulator numbers buffers in; the digest sorts them)."""
    return digest(p.finish()), [(name, list(rp.instance_rects), list(rp.partial_rects))
                                for name, rp in p.planners.items() if rp is not None]


def _plans(monkeypatch, seed, on):
    monkeypatch.setattr(slabplans, "SLAB_PLANS", on)
    rng = random.Random(seed)
    configs = [_config(rng), _config(rng)]
    p = Planner(MACHINE, memo=RegionPlanMemo(0))
    p.add_launches(_program(configs))
    return changed_states(p, configs, _operator, _config, rng, changes=3, undo_chance=0.5)


def changed_states(p, configs, operator, draw_config, rng, changes, undo_chance, ops=2):
    """The planner's _state now and after each of `changes` random replacements of one of
    the first `ops` operators' configs (operator(op, config) its launches), each undone
    (and its state taken again) with chance `undo_chance`."""
    out = [_state(p)]
    for _ in range(changes):
        op = rng.randrange(ops)
        old, configs[op] = configs[op], draw_config(rng)
        p.replace(operator(op, configs[op]), record_undo=True)
        out.append(_state(p))
        if rng.random() < undo_chance:
            p.undo()
            configs[op] = old
            out.append(_state(p))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_slab_plans_equal_whole_plans(monkeypatch, seed):
    assert _plans(monkeypatch, seed, True) == _plans(monkeypatch, seed, False)


@pytest.mark.parametrize("seed", range(20))
def test_a_launch_added_after_a_slab_plan(monkeypatch, seed):
    """A region planned slab by slab keeps no buffers' accesses: a launch added later (reads
    of every step of x and h, a write of x's first step) plans into a region re-planned
    whole, not into that end state."""
    def build(on):
        monkeypatch.setattr(slabplans, "SLAB_PLANS", on)
        rng = random.Random(seed)
        configs = [_config(rng), _config(rng)]
        p = Planner(MACHINE, memo=RegionPlanMemo(0))
        p.add_launches(_program(configs))
        op = rng.randrange(2)
        p.replace(_operator(op, _config(rng)))
        whole = Rect((0, 0, 0), (STEPS, 8, 6))
        reqs = (RegionRequirement(X, whole, R), RegionRequirement(H, whole, R))
        p.add_launch(IndexLaunch("extra", noop, (2,), lambda c: reqs, devices=[0, 3]))
        p.add_launch(IndexLaunch("first", noop, (1,), lambda c: (RegionRequirement(
            X, Rect((0, 0, 0), (1, 8, 6)), WD),), devices=[1]))
        return _state(p)

    assert build(True) == build(False)


def test_slab_plans_are_used(monkeypatch):
    """The programs above do re-plan regions slab by slab (else the comparison shows
    nothing), some slabs by themselves (a source choice differing from their class's), and
    some regions fall back to being planned whole (gh, whose loss sums into every step, is
    not planned with that entry cut here: test_slab_cut_first.py)."""
    monkeypatch.setattr(slabplans, "_cut_first", lambda region, log: None)
    calls = []
    own = [0]
    monkeypatch.setattr(slabplans, "OWN_SLABS", own)
    original = slabplans.slab_plan

    def counted(planner, name, log):
        got = original(planner, name, log)
        calls.append(got is not None)
        return got

    monkeypatch.setattr(regionplans, "slab_plan", counted)
    for seed in range(40):
        _plans(monkeypatch, seed, True)
    assert sum(calls) > 100 and not all(calls)
    assert own[0] > 20


def test_refusals_are_counted_by_reason(monkeypatch):
    """Every region slab_plan leaves to be planned whole counts once in slabplans.REFUSED,
    under its reason (tools/replan_regions.py reports them)."""
    monkeypatch.setattr(slabplans, "_cut_first", lambda region, log: None)
    refused = Counter()
    monkeypatch.setattr(slabplans, "REFUSED", refused)
    left = []
    original = slabplans.slab_plan

    def counted(planner, name, log):
        got = original(planner, name, log)
        if got is None:
            left.append(name)
        return got

    monkeypatch.setattr(regionplans, "slab_plan", counted)
    for seed in range(40):
        _plans(monkeypatch, seed, True)
    assert sum(refused.values()) == len(left) > 0


def _batch_parted_steps(reader_shift: int):
    """Per step a launch writing x[t] in 8 batch parts (8 devices), then per step a launch
    reading them on other devices: along the batch there are more slabs (8) than steps (4),
    but each launch reads in every batch slab."""
    steps, parts = 4, 8
    x = Region("xb", (steps, parts, 6), "float32")

    def at(t, i):
        return Rect((t, i, 0), (t + 1, i + 1, 6))

    out = []
    for t in range(steps):
        out.append(IndexLaunch(f"w/s{t}", noop, (parts,), lambda c, t=t: (RegionRequirement(
            x, at(t, c[0]), WD),), devices=[i % NDEV for i in range(parts)]))
    for t in range(steps):
        out.append(IndexLaunch(f"r/s{t}", noop, (parts,), lambda c, t=t: (RegionRequirement(
            x, at(t, c[0]), R),), devices=[(i + reader_shift) % NDEV for i in range(parts)]))
    return x, out


@pytest.mark.parametrize("shift", (1, 2))
def test_the_dimension_whose_entries_read_in_one_slab(monkeypatch, shift):
    """Where each launch reads in several slabs along the dimension with the most slabs (the
    batch), the region is planned slab by slab along another (the steps): a plan, equal to
    planning whole."""
    def build(on):
        monkeypatch.setattr(slabplans, "SLAB_PLANS", on)
        x, program = _batch_parted_steps(shift)
        p = Planner(MACHINE, memo=RegionPlanMemo(0))
        p.add_launches(program)
        got = slabplans.slab_plan(p, x.name, p.log[x.name])
        p.replace(_batch_parted_steps(shift)[1][:1])       # x re-planned (slab_plan's path)
        return got, _state(p)

    got, state = build(True)
    assert got is not None and state == build(False)[1]
