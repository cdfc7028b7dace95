"""The planner's shortcuts for aligned accesses give exactly the graphs of its general code.

`bufferaccesses.ALIGNED_BUFFERS` (a buffer accessed only by rects equal to or disjoint from
each other keeps its writers and readers in dicts by rect, answered by lookup) and
`coherence.FAST_PATHS` (reads done inline per launch, a gradient's first sum without the
general piece-by-piece work) must change nothing but the time: random launch sequences are
planned with them on and off and the graphs compared node for node (the golden digest:
nodes, edges, Red+ targets, reduce inputs, buffers, valid pieces and pending sums), through
plan(), and through a replannable Planner with replace() and undo(). The sequences mix the
aligned case (a few partitions reused over time-step slices, each part on its own device,
data parallel's pattern) with what breaks it (other degrees, halos, random devices,
replicated writes, Red+ onto values, reads of sums), so buffers leave the aligned mode at
every point of a plan.
"""
from __future__ import annotations

import random

import pytest

from taskrt import (R, RED, RW, WD, Machine, Planner, Rect, Region,
                    RegionRequirement, block_rect, plan)
from taskrt import bufferaccesses, coherence
from taskrt.errors import PlanError

from taskrt_helpers import launches_of
from test_graph_golden import digest

MACHINE = Machine.grid(2, 2)
NDEV = 4
STEPS = 4
SEQ = Region("seq", (STEPS, 8, 6), "float32")       # time steps x batch x hidden
W = Region("w", (6, 6), "float32")                   # a weight
GW = Region("gw", (6, 6), "float32")                 # its gradient (no initial value)
ACT = Region("act", (8, 6), "float32")               # an activation, written first
REGIONS = (SEQ, W, GW, ACT)
INITIAL = {SEQ: [(SEQ.rect, d) for d in range(NDEV)], W: [(W.rect, 0), (W.rect, 2)]}


def _parts(rng, region, step, halos=True):
    """(rects, aligned?) of one partition of `region` (of one time step of SEQ)."""
    shape = region.shape[1:] if region is SEQ else region.shape
    if rng.random() < 0.7:
        degrees = (rng.choice((2, 4)), 1)            # the usual batch split
    else:
        degrees = (rng.randint(1, 3), rng.randint(1, 3))
    colors = [(i, j) for i in range(degrees[0]) for j in range(degrees[1])]
    rects = [block_rect(shape, degrees, c) for c in colors]
    if region is SEQ:
        rects = [Rect((step,) + r.lo, (step + 1,) + r.hi) for r in rects]
    if halos and rng.random() < 0.15:                # a halo: overlaps the neighbours
        whole = region.rect
        rects = [Rect(tuple(max(l - 1, a) for l, a in zip(r.lo, whole.lo)),
                      tuple(min(h + 1, b) for h, b in zip(r.hi, whole.hi))) for r in rects]
    return rects


def _program(seed: int):
    """A list of (points [(device, [(region, rect, privilege)])], replicas)."""
    rng = random.Random(seed)
    out = []
    # ACT written first, part by part, and GW summed into (each element has a value or a
    # sum).
    out.append(([(i % NDEV, [(ACT, r, WD)]) for i, r in enumerate(_parts(rng, ACT, 0, False))],
                False))
    out.append(([(d, [(GW, GW.rect, RED)]) for d in range(NDEV)], False))
    for _ in range(rng.randint(4, 14)):
        kind = rng.choice(("step", "step", "step", "act", "weight", "grad", "update"))
        if kind in ("step", "act"):
            region = SEQ if kind == "step" else ACT
            rects = _parts(rng, region, rng.randrange(STEPS))
            priv = rng.choice((R, R, WD, RW, RED))
            if priv is not R and any(a.overlaps(b) for i, a in enumerate(rects)
                                     for b in rects[i + 1:]):
                priv = rng.choice((R, RED))          # overlapping writes interfere
            shift = rng.choice((0, 0, 0, 1, rng.randrange(NDEV)))
            devices = [(i + shift) % NDEV if rng.random() < 0.9 else rng.randrange(NDEV)
                       for i in range(len(rects))]
            points = [(d, [(region, r, priv)]) for d, r in zip(devices, rects)]
            if rng.random() < 0.5:                   # also reads the weight
                for _, reqs in points:
                    reqs.append((W, W.rect, R))
            out.append((points, False))
        elif kind == "weight":
            devices = rng.sample(range(NDEV), rng.randint(1, NDEV))
            out.append(([(d, [(W, W.rect, R)]) for d in devices], False))
        elif kind == "grad":
            rects = _parts(rng, GW, 0) if rng.random() < 0.3 else [GW.rect] * NDEV
            devices = list(range(NDEV))[:len(rects)] if len(rects) <= NDEV else \
                [i % NDEV for i in range(len(rects))]
            out.append(([(d, [(GW, r, RED)]) for d, r in zip(devices, rects)], False))
        else:                                        # the update: read GW, write W replicated
            devices = rng.sample(range(NDEV), rng.randint(1, NDEV))
            out.append(([(d, [(GW, GW.rect, R), (W, W.rect, RW)]) for d in devices], True))
    return out


def _outcome(build):
    try:
        return build()
    except PlanError as e:
        return f"PlanError: {e}"


def _both(monkeypatch, build):
    got = []
    for on in (True, False):
        monkeypatch.setattr(bufferaccesses, "ALIGNED_BUFFERS", on)
        monkeypatch.setattr(coherence, "FAST_PATHS", on)
        got.append(_outcome(build))
    return got


@pytest.mark.parametrize("seed", range(150))
def test_plan_with_and_without_shortcuts(monkeypatch, seed):
    program = _program(seed)
    fast, general = _both(monkeypatch,
                          lambda: digest(plan(launches_of(program), MACHINE, INITIAL)))
    assert fast == general


@pytest.mark.parametrize("seed", range(40))
def test_replace_and_undo_with_and_without_shortcuts(monkeypatch, seed):
    """A replannable planner (add_launches: regions alike planned once), then launches
    swapped for another program's (replace, region plans not remembered) and undone."""
    program = _program(seed)
    other = _program(seed + 1000)
    rng = random.Random(seed)
    swap = sorted(rng.sample(range(1, len(program)), min(2, len(program) - 1)))

    def build():
        from taskrt.regionmemo import RegionPlanMemo
        p = Planner(MACHINE, INITIAL, memo=RegionPlanMemo(0))
        p.add_launches(launches_of(program))
        first = digest(p.finish())
        new = [launches_of(other)[li % len(other)] for li in swap]
        for li, launch in zip(swap, new):
            launch.name = f"l{li}"
        p.replace(new, record_undo=True)
        second = digest(p.finish())
        p.undo()
        return first, second, digest(p.finish())

    fast, general = _both(monkeypatch, build)
    assert fast == general


def test_buffer_leaves_the_aligned_mode_when_a_rect_overlaps():
    """A buffer's predecessors in both modes, across its switch to the general one."""
    a, b = Rect((0, 0), (2, 4)), Rect((2, 0), (4, 4))
    half = Rect((1, 0), (3, 4))
    got = []
    for on in (True, False):
        bufferaccesses.ALIGNED_BUFFERS = on
        try:
            buf = bufferaccesses.BufferAccesses()
            out = [buf.write(a, "w1"), buf.write(b, "w2"), buf.read(a, "r1"),
                   buf.read(b, "r2"), buf.read(a, "r3")]
            aligned = buf._w is not None
            out += [buf.write(half, "w3"), buf.read(a, "r4"), buf.read(b, "r5"),
                    buf.write(Rect((0, 0), (4, 4)), "w4")]
            got.append((out, aligned, buf._w is None))
        finally:
            bufferaccesses.ALIGNED_BUFFERS = True
    assert got[0][1] and got[0][2]        # aligned until `half`, general after
    assert got[0][0] == got[1][0]
    assert got[0][0][5] == {"w1", "w2", "r1", "r2", "r3"} and got[0][0][6] == {"w1", "w3"}


def test_by_region_of_points_alike_equals_the_loop():
    """launchplan.by_region's per-requirement lists (points asking the same regions with
    the same privileges) give what its point-by-point loop gives, dict order included, and
    it falls back to the loop when the points differ."""
    from taskrt.launchplan import _by_region_alike, _by_region_loop
    planner = Planner(MACHINE, INITIAL)
    checked = 0
    for seed in range(60):
        for launch in launches_of(_program(seed)):
            points = planner._expand(launch)
            alike, loop = _by_region_alike(points), _by_region_loop(points)
            assert alike is not None
            assert [list(d.items()) for d in alike] == [list(d.items()) for d in loop]
            checked += 1
    assert checked > 300
    a, b = Rect((0, 0), (4, 6)), Rect((4, 0), (8, 6))
    twice = [((0,), 0, (RegionRequirement(ACT, a, R), RegionRequirement(ACT, b, R)))]
    other_priv = [((0,), 0, (RegionRequirement(ACT, a, R),)),
                  ((1,), 1, (RegionRequirement(ACT, b, RW),))]
    other_region = [((0,), 0, (RegionRequirement(ACT, a, R),)),
                    ((1,), 1, (RegionRequirement(GW, Rect((2, 0), (4, 6)), R),))]
    for points in (twice, other_priv, other_region):
        assert _by_region_alike(points) is None
        from taskrt.launchplan import by_region
        assert by_region(points) == _by_region_loop(points)
