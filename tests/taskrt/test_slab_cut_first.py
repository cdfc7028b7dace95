"""A region whose first entry sums over every time step (attention's backward into an LSTM's
output) planned slab by slab with that entry cut at the slabs (taskrt/slabplans.py
_cut_first) gets exactly the graph of planning it whole.

Random programs in that shape: a gradient G (batch x steps x hidden, time in the middle, as
NMT's) first summed over all steps by an "attention" launch (its own batch x hidden
partition, some parts summed by several devices), in some programs read at every other step
by another operator (its own partition), then per step read back by an LSTM-like operator
(its own partition, a grid or not, replicated readers), which may also sum into step t-1 (a
recurrent gradient). A
replannable planner gets the program; then one operator's config is replaced (region plans
not remembered) and sometimes undone; the graphs (golden digest) and the buffers' order are
compared with `slabplans.SLAB_PLANS` on and off, and the cut plans must have been used.
"""
from __future__ import annotations

import random
from collections import Counter

import pytest

from taskrt import (R, RED, IndexLaunch, Machine, Planner, Rect, Region, RegionRequirement,
                    block_rect)
from taskrt import regionplans, slabplans
from taskrt.regionmemo import RegionPlanMemo

from test_slab_plans import _state, changed_states

MACHINE = Machine.grid(2, 2)
NDEV = 4
STEPS = 6
BATCH, HIDDEN = 8, 6
G = Region("g", (BATCH, STEPS, HIDDEN), "float32")


def noop(ctx, *views):
    return None


def _parts(rng):
    """A step slice's (batch x hidden) parts: a block grid, or (not a grid) columns each
    split its own way in the batch."""
    if rng.random() < 0.25:
        cols = rng.choice((2, 3))
        out = []
        for c in range(cols):
            h = block_rect((HIDDEN,), (cols,), (c,))
            rows = rng.choice((1, 2, 4))
            for i in range(rows):
                b = block_rect((BATCH,), (rows,), (i,))
                out.append(Rect((b.lo[0], h.lo[0]), (b.hi[0], h.hi[0])))
        return out
    degrees = rng.choice(((1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (8, 1), (1, 3), (4, 3)))
    return [block_rect((BATCH, HIDDEN), degrees, (i, j))
            for i in range(degrees[0]) for j in range(degrees[1])]


def _config(rng):
    """(parts, per part its devices: one, or several summing / reading the same part)."""
    parts = _parts(rng)
    devices = []
    for k in range(len(parts)):
        first = rng.randrange(NDEV) if rng.random() < 0.3 else k % NDEV
        many = rng.choice((1, 1, 1, 2, 4))
        devices.append([(first + i) % NDEV for i in range(many)])
    return parts, devices


def _at(part, lo, hi):
    return Rect((part.lo[0], lo, part.lo[1]), (part.hi[0], hi, part.hi[1]))


def _launch(name, cfg, reqs_of, shift=0):
    parts, devices = cfg
    table, devs = [], []
    for part, ds in zip(parts, devices):
        for d in ds:
            table.append(tuple(reqs_of(part)))
            devs.append((d + shift) % NDEV)
    return IndexLaunch(name, noop, (len(table),), lambda c, table=table: table[c[0]],
                       devices=devs)


def _operator(op: int, cfg, recurrent: bool):
    if op == 0:         # attention's backward: sums into every step
        return [_launch("attn/bwd", cfg, lambda p: [RegionRequirement(G, _at(p, 0, STEPS),
                                                                      RED)])]
    if op == 1:         # the LSTM's backward, last step first: reads g[t], sums into g[t-1]
        return [_launch(f"lstm/s{t}/bwd", cfg, lambda p, t=t: [
            RegionRequirement(G, _at(p, t, t + 1), R)] +
            ([RegionRequirement(G, _at(p, t - 1, t), RED)] if recurrent and t else []))
            for t in reversed(range(STEPS))]
    # Another operator reading every other step before the LSTM (so the slabs' sums are
    # retired alike in some slabs only).
    return [_launch(f"other/s{t}", cfg, lambda p, t=t: [
        RegionRequirement(G, _at(p, t, t + 1), R)], 1) for t in range(0, STEPS, 2)]


def _program(configs, recurrent, ops):
    order = (0, 2, 1) if ops == 3 else (0, 1)
    return [launch for op in order for launch in _operator(op, configs[op], recurrent)]


def _plans(monkeypatch, seed, on):
    monkeypatch.setattr(slabplans, "SLAB_PLANS", on)
    rng = random.Random(seed)
    recurrent = rng.random() < 0.5
    ops = 3 if rng.random() < 0.5 else 2
    configs = [_config(rng) for _ in range(3)]
    p = Planner(MACHINE, memo=RegionPlanMemo(0))
    p.add_launches(_program(configs, recurrent, ops))
    return changed_states(p, configs, lambda op, config: _operator(op, config, recurrent),
                          _config, rng, changes=4, undo_chance=0.4, ops=ops)


@pytest.mark.parametrize("seed", range(150))
def test_cut_first_entry_plans_equal_whole_plans(monkeypatch, seed):
    assert _plans(monkeypatch, seed, True) == _plans(monkeypatch, seed, False)


@pytest.mark.parametrize("seed", range(80))
def test_cut_plans_checked_without_the_quick_look(monkeypatch, seed):
    """The same with slab_plan's quick look for sums that meet (_sums_meet, a shortcut)
    off: the checks while planning (_mark_summed, _OneSum) keep the graphs equal."""
    monkeypatch.setattr(slabplans, "_sums_meet", lambda first, log, d: False)
    assert _plans(monkeypatch, seed, True) == _plans(monkeypatch, seed, False)


def test_cut_first_entry_plans_are_used(monkeypatch):
    """The programs above do plan regions with their first entry cut (else the comparison
    shows nothing), and some are refused (not a grid, or sums met), each refusal counted in
    slabplans.REFUSED."""
    counted_refusals = Counter()
    monkeypatch.setattr(slabplans, "REFUSED", counted_refusals)
    used, refused, left = [0], [0], [0]
    original = slabplans.slab_plan

    def counted(planner, name, log):
        got = original(planner, name, log)
        left[0] += got is None
        if not slabplans._splits(planner.regions[name], log):
            if got is None:
                refused[0] += 1
            else:
                used[0] += 1
        return got

    monkeypatch.setattr(regionplans, "slab_plan", counted)
    for seed in range(150):
        _plans(monkeypatch, seed, True)
    assert used[0] > 10 and refused[0] > 10
    assert sum(counted_refusals.values()) == left[0]


def _sums_reordered_program(steps: int = 4):
    """Two sums of one device over every step (device 0: hidden 0:3 and 3:6), then per step
    a Red+ of device 0 over both (accumulating onto each) and a read of the first on device
    1; the second's parts are read last. Planned whole, the first read retires the first
    sum's part of step 0, which moves it behind the second: from step 1 on, device 0's Red+
    meets the sums in the other order, and its targets follow that order."""
    a, b = Rect((0, 0, 0), (BATCH, steps, 3)), Rect((0, 0, 3), (BATCH, steps, HIDDEN))
    first = IndexLaunch("attn/bwd", noop, (2,), lambda c: ((RegionRequirement(G, (a, b)[c[0]],
                                                                              RED),)),
                        devices=[0, 0])

    def one(name, device, rect, priv):
        return IndexLaunch(name, noop, (1,), lambda c: ((RegionRequirement(G, rect, priv),)),
                           devices=[device])

    out = [first]
    for t in range(steps):
        out.append(one(f"y/s{t}", 0, Rect((0, t, 0), (BATCH, t + 1, HIDDEN)), RED))
        out.append(one(f"x/s{t}", 1, Rect((0, t, 0), (BATCH, t + 1, 3)), R))
    for t in range(steps):
        out.append(one(f"z/s{t}", 1, Rect((0, t, 3), (BATCH, t + 1, HIDDEN)), R))
    return out


def _replanned_state(monkeypatch, on):
    monkeypatch.setattr(slabplans, "SLAB_PLANS", on)
    program = _sums_reordered_program()
    p = Planner(MACHINE, memo=RegionPlanMemo(0))
    p.add_launches(program)
    p.replace([_sums_reordered_program()[0]])       # G re-planned (slab_plan's path)
    return _state(p)


def test_a_red_meeting_two_cut_sums_is_planned_whole(monkeypatch):
    """A Red+ meeting two of its device's sums of a cut first entry (_OneSum): planned whole,
    their order (and so its targets') can differ from the cut plan's, so slab_plan refuses;
    the graph equals planning whole."""
    counted = Counter()
    monkeypatch.setattr(slabplans, "REFUSED", counted)
    assert _replanned_state(monkeypatch, True) == _replanned_state(monkeypatch, False)
    assert counted["a cut first entry's sums met others"] >= 1


def _batch_parted_program(shift: int):
    """Attention's backward summing two batch halves over every step, then the LSTM's
    backward in 8 batch parts (8 slabs along the batch, more than the 6 steps), each step's
    launch reading in every batch slab and summing into step t-1."""
    halves = ([block_rect((BATCH, HIDDEN), (2, 1), (i, 0)) for i in range(2)], [[0], [1]])
    eighths = ([block_rect((BATCH, HIDDEN), (8, 1), (i, 0)) for i in range(8)],
               [[(i + shift) % NDEV] for i in range(8)])
    return _operator(0, halves, True) + _operator(1, eighths, True)


@pytest.mark.parametrize("shift", (0, 1, 2))
def test_the_cut_along_the_steps_where_the_batch_has_more_slabs(monkeypatch, shift):
    """Where the later entries split into more slabs along the batch than along the steps
    but each reads in every batch slab, the first entry is cut along the steps (before: along
    the batch, refused): a plan, equal to planning whole."""
    def build(on):
        monkeypatch.setattr(slabplans, "SLAB_PLANS", on)
        p = Planner(MACHINE, memo=RegionPlanMemo(0))
        p.add_launches(_batch_parted_program(shift))
        got = slabplans.slab_plan(p, G.name, p.log[G.name])
        p.replace(_batch_parted_program(shift)[:1])         # G re-planned (slab_plan's path)
        return got, _state(p)

    got, state = build(True)
    assert got is not None and state == build(False)[1]
