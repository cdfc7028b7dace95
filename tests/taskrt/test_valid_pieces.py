"""The compiled read walk over the valid pieces as arrays (taskrt/validpieces.py,
validkernels.py) against its oracle, the Python walk over a RectIndex (coherence.RegionState,
RegionPlanner._copy_in; coherence.COMPILED_READS off): on random region programs -- grid and
non-grid parts, 1-4 dimensions, replicated and partitioned initial data, several ranks,
reads overlapping within a launch, WD / RW writes, replicas, Red+ sums, readers reading again
-- the same graph node for node (fingerprint: every node and its preds), the same valid
pieces in insertion order with their holders in order, the same sent counts, pending sums
and instances' boxes, or the same error. Also the state updates alone (set_only_holder,
add_holder) and the source choices logged and forced (slabreplay.py's planners). The
compiled side runs twice: with its index (validindex.py) at the default sizes, and at tiny
ones (a grid from the first piece, holder rows from one holder), so that small programs
go through the grid and the rows too; regions written piece by piece (hundreds of pieces,
as NMT's) pass the default sizes on the way."""
from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from taskrt import (R, RED, RW, WD, IndexLaunch, Machine, PlanError, Planner, Rect, Region,
                    RegionRequirement)
from taskrt import coherence
from taskrt.coherence import RegionState
from taskrt.holders import Holders
from taskrt.regionclasses import plan_alone
from taskrt.slabreplay import _ForcedPlanner, _RecordingPlanner
from taskrt import validindex as vi
from taskrt import validkernels as vk
from taskrt import validpieces
from taskrt.validpieces import PieceState

from taskrt_helpers import noop


def _rand_rect(rng, shape) -> Rect:
    lo, hi = [], []
    for s in shape:
        a = rng.randrange(s)
        lo.append(a)
        hi.append(rng.randint(a + 1, s))
    return Rect(tuple(lo), tuple(hi))


def _grid(rng, shape) -> list[Rect]:
    """A random block partition (uneven cuts) of the whole shape."""
    cuts = []
    for s in shape:
        k = rng.randint(1, min(3, s))
        points = sorted(rng.sample(range(1, s), k - 1)) if s > 1 else []
        cuts.append([0] + points + [s])
    rects = [()]
    for c in cuts:
        rects = [r + ((c[i], c[i + 1]),) for r in rects for i in range(len(c) - 1)]
    return [Rect.of(*r) for r in rects]


def _program(seed: int):
    """(machine, regions, initial, launches) of a random program."""
    rng = random.Random(seed)
    machine = Machine.grid(rng.choice([1, 2, 4]), rng.choice([1, 2, 4]))
    ndev = len(machine.devices)
    nd = rng.choice([1, 2, 2, 3, 4])
    shape = tuple(rng.randint(2, 7) for _ in range(nd))
    x = Region(f"x{seed}", shape, "float32")        # has initial data
    g = Region(f"g{seed}", shape, "float32")        # starts unwritten: sums, errors
    whole = x.rect
    if rng.random() < 0.5:
        initial = {x: [(whole, d) for d in rng.sample(range(ndev), rng.randint(1, ndev))]}
    else:
        initial = {x: [(r, rng.randrange(ndev)) for r in _grid(rng, shape)]}
    launches = []
    for li in range(rng.randint(2, 12)):
        region = rng.choice([x, x, g])
        kind = rng.random()
        if kind < 0.45:
            rects = _grid(rng, shape)
        elif kind < 0.7:
            rects = [_rand_rect(rng, shape) for _ in range(rng.randint(1, 6))]
        else:
            rects = [region.rect] * rng.randint(1, ndev)
        priv = rng.choice([R, R, R, WD, RW, RED])
        replicas = priv is WD and all(r == whole for r in rects) and rng.random() < 0.5
        if priv in (WD, RW) and not replicas and 0.45 <= kind:     # writes: disjoint
            rects = _grid(rng, shape) if kind < 0.7 else rects[:1]
        points, devices = [], []
        for r in rects:
            reqs = [RegionRequirement(region, r, priv)]
            if priv is R and rng.random() < 0.3:      # a second read, overlapping maybe
                reqs.append(RegionRequirement(region, _rand_rect(rng, shape), R))
            points.append(tuple(reqs))
            devices.append(rng.randrange(ndev))
        if replicas:
            devices = rng.sample(range(ndev), min(len(rects), ndev))
            points = points[:len(devices)]
        launches.append(IndexLaunch(f"l{li}", noop, (len(points),),
                                    lambda c, t=points: t[c[0]], devices=devices,
                                    replicas=replicas))
    return machine, initial, launches


def sum_regions(rng, seed: int, side: int):
    """(machine, devices, shape, x, g, initial) of a random Red+ program: a machine of 2-8
    devices, a shape of 1-3 dimensions of 2-`side` elements, x with a base value on some
    devices (its sums go to partial buffers), g with none (its sums start in instances)."""
    machine = Machine.grid(rng.choice([1, 2]), rng.choice([2, 4]))
    ndev = len(machine.devices)
    nd = rng.choice([1, 2, 2, 3])
    shape = tuple(rng.randint(2, side) for _ in range(nd))
    x = Region(f"x{seed}", shape, "float32")
    g = Region(f"g{seed}", shape, "float32")
    initial = {x: [(x.rect, d) for d in rng.sample(range(ndev), rng.randint(1, ndev))]}
    return machine, ndev, shape, x, g, initial


def _red_program(seed: int):
    """(machine, regions, initial, launches) of a random Red+-heavy program: several
    contributors per rect (the same rect on several devices, grid parts, random rects
    overlapping them partly), sums onto a base value (x) and onto nothing (g), then reads
    of all of a sum by exactly its contributors (all-reduces), by a subset of them, by
    others, and of parts; writes now and then retire sums."""
    rng = random.Random(seed)
    machine, ndev, shape, x, g, initial = sum_regions(rng, seed, 7)
    launches = []
    last: dict = {}         # region -> (rects, devices) of its last Red+ launch
    for li in range(rng.randint(3, 14)):
        region = rng.choice([x, g, g])
        kind = rng.random()
        if kind < 0.5 or region not in last:        # a Red+ launch
            shape_kind = rng.random()
            if shape_kind < 0.4:
                k = rng.randint(2, ndev)
                rects = [region.rect] * k
                devices = rng.sample(range(ndev), k)
            elif shape_kind < 0.7:
                rects = _grid(rng, shape) * rng.randint(1, 2)
                devices = [rng.randrange(ndev) for _ in rects]
            else:
                rects = [_rand_rect(rng, shape) for _ in range(rng.randint(1, 5))]
                devices = [rng.randrange(ndev) for _ in rects]
            priv = RED
            last[region] = (rects, devices)
        else:                                       # read the sums (or write over them)
            rects0, devs0 = last[region]
            read_kind = rng.random()
            priv = R
            if read_kind < 0.3:                     # all of each sum by its contributors
                rects, devices = list(rects0), list(devs0)
            elif read_kind < 0.55:                  # a subset of the contributors
                k = rng.randint(1, len(devs0))
                rects, devices = list(rects0[:k]), list(devs0[:k])
            elif read_kind < 0.8:                   # parts, by anyone
                rects = [_rand_rect(rng, shape) for _ in range(rng.randint(1, 4))]
                devices = [rng.choice(devs0 + [rng.randrange(ndev)]) for _ in rects]
            else:                                   # a write over part of the sums
                priv, rects, devices = write_over(rng, shape, ndev)
        launches.append(launch_of(f"l{li}", region, rects, priv, devices))
    return machine, initial, launches


def write_over(rng, shape: tuple, ndev: int) -> tuple:
    """(privilege, rects, devices) of a write (discard or read-write) of a random rect by a
    random device: a launch retiring the sums under it."""
    return rng.choice([WD, RW]), [_rand_rect(rng, shape)], [rng.randrange(ndev)]


def launch_of(name: str, region, rects, priv, devices) -> IndexLaunch:
    """A launch of one point per rect, asking `priv` on that rect of `region`."""
    points = [(RegionRequirement(region, r, priv),) for r in rects]
    return IndexLaunch(name, noop, (len(points),), lambda c, t=points: t[c[0]],
                       devices=devices)


def _state(rp) -> tuple:
    valid = [(r, tuple(h)) for _, r, h in rp.state.valid]
    return (valid, dict(rp.sent.items()), rp.final_pending(), dict(rp.instance_rects),
            dict(rp.partial_rects))


def _index(monkeypatch, tiny: bool) -> None:
    """The compiled side's index at its default sizes, or at tiny ones (every region with a
    piece gets a grid; every holder slice a row)."""
    monkeypatch.setattr(validpieces, "GRID_AT", 0 if tiny else _DEFAULTS[0])
    monkeypatch.setattr(validpieces, "ROW_AT", 1 if tiny else _DEFAULTS[1])
    monkeypatch.setattr(validpieces, "ROW_RATIO", 1 << 40 if tiny else _DEFAULTS[2])


_DEFAULTS = (validpieces.GRID_AT, validpieces.ROW_AT, validpieces.ROW_RATIO)


def _planned(seed: int, compiled: bool, monkeypatch, program=_program, tiny=False):
    monkeypatch.setattr(coherence, "COMPILED_READS", compiled)
    _index(monkeypatch, tiny)
    machine, initial, launches = program(seed)
    planner = Planner(machine, initial)
    try:
        planner.add_launches(launches)
    except PlanError as e:
        return ("error", str(e))
    states = {name: _state(rp) for name, rp in sorted(planner.planners.items())}
    graph = planner.finish()
    _KINDS.update(n.kind for n in graph)
    return graph.fingerprint(), states


_KINDS: Counter = Counter()     # the kinds of node _planned made (what a test exercised)


@pytest.mark.parametrize("block", range(8))
def test_random_programs_plan_as_the_oracle(block, monkeypatch):
    errors = 0
    for seed in range(block * 40, block * 40 + 40):
        old = _planned(seed, False, monkeypatch)
        for tiny in (False, True):
            new = _planned(seed, True, monkeypatch, tiny=tiny)
            assert new == old, f"seed {seed} tiny index {tiny}"
        errors += old[0] == "error"
    assert errors < 30          # (most programs plan: the walk is what they compare)


@pytest.mark.parametrize("block", range(4))
def test_red_heavy_programs_plan_as_the_oracle(block, monkeypatch):
    """Red+-heavy programs (_red_program): the reductions' updates of the valid pieces
    (the base gathered onto the reducer, set_only_holder_of the summed pieces, all-reduces)
    and the reads after them, as the oracle plans them."""
    errors = 0
    _KINDS.clear()
    for seed in range(block * 40, block * 40 + 40):
        old = _planned(seed, False, monkeypatch, _red_program)
        for tiny in (False, True):
            new = _planned(seed, True, monkeypatch, _red_program, tiny)
            assert new == old, f"seed {seed} tiny index {tiny}"
        errors += old[0] == "error"
    assert errors < 30
    assert _KINDS["reduce"] > 40 and _KINDS["allreduce"] > 5, _KINDS


@pytest.mark.parametrize("tiny", [False, True])
def test_state_updates_equal_the_oracle(tiny, monkeypatch):
    """set_only_holder, add_holder and add, in random sequences over grids and random rects
    (cuts of cuts), leave the same pieces in the same order with the same holders."""
    _index(monkeypatch, tiny)
    for seed in range(300):
        rng = random.Random(seed)
        shape = tuple(rng.randint(2, 8) for _ in range(rng.choice([1, 2, 3, 6])))
        region = Region("s", shape)
        a, b = RegionState(region), PieceState(region, 20)
        for st in (a, b):
            st.valid.add(region.rect, Holders([0, 1, 2]))
        for _ in range(rng.randint(1, 25)):
            r = _rand_rect(rng, shape) if rng.random() < 0.7 else rng.choice(_grid(rng, shape))
            if rng.random() < 0.4:
                devices = tuple(rng.sample(range(20), rng.randint(1, 3)))
                a.set_only_holder(r, devices)
                b.set_only_holder(r, devices)
            else:
                d = rng.randrange(20)
                a.add_holder(r, d)
                b.add_holder(r, d)
            assert [(r, tuple(h)) for _, r, h in a.valid] == \
                [(r, tuple(h)) for _, r, h in b.valid], f"seed {seed}"
            q = _rand_rect(rng, shape)
            assert [(r, tuple(h)) for _, r, h in a.valid.overlapping(q)] == \
                [(r, tuple(h)) for _, r, h in b.valid.overlapping(q)]


@pytest.mark.parametrize("tiny", [False, True])
def test_many_holders_and_compaction(tiny, monkeypatch):
    """A weight replicated on 4,096 devices (one piece, 4,096 holders), read in parts by new
    devices and rewritten, many times (the pool and positions compacted on the way)."""
    _index(monkeypatch, tiny)
    region = Region("w", (64, 8))
    a, b = RegionState(region), PieceState(region, 4096 + 200)   # (later devices: past the rows)
    for st in (a, b):
        st.valid.add(region.rect, Holders(range(4096)))
    rng = random.Random(7)
    for step in range(400):
        r = _rand_rect(rng, region.shape)
        if step % 50 == 49:
            for st in (a, b):
                st.set_only_holder(region.rect, range(step, step + 4096))
        else:
            for st in (a, b):
                st.add_holder(r, 4096 + step)
    assert [(r, tuple(h)) for _, r, h in a.valid] == [(r, tuple(h)) for _, r, h in b.valid]


def test_holder_rows_answer_as_a_scan():
    """validindex.holds with rows from one holder on, against a scan of the slice: slices
    shared by pieces of different counts (as a slice extended in place at the pool's end:
    the longer piece's later holders are not the shorter's), duplicates, devices past the
    rows, too few rows, asked in random order (the compiled function, as the kernels call
    it)."""
    validpieces._kernels()
    rng = random.Random(3)
    for trial in range(300):
        ncols = rng.randint(1, 12)
        pool, pieces = [], []
        for _ in range(rng.randint(1, 6)):
            s = len(pool)
            n = rng.randint(1, 8)
            pool.extend(rng.choices(range(ncols + 3), k=n) if rng.random() < 0.3 else
                        rng.sample(range(ncols + 3), min(n, ncols + 3)))
            for _ in range(rng.randint(1, 3)):
                pieces.append((s, rng.randint(1, len(pool) - s)))
        pool_a = np.array(pool, np.int64)
        hold = np.array(pieces, np.int64)
        gi = np.zeros(vi.gi_size(1), np.int64)
        gi[vi.G_ROW_AT] = 1
        mrow = np.full(len(pool), -1, np.int64)
        mwhere = np.zeros((rng.randint(0, 4), ncols + 1), np.int32)
        for _ in range(60):
            p, d = rng.randrange(len(pieces)), rng.randrange(ncols + 4)
            s, c = pieces[p]
            assert vi.holds(pool_a, hold, p, d, gi, mrow, mwhere) == (d in pool[s:s + c]), \
                f"trial {trial}"


def test_cached_loops_go_stale_with_the_helpers_files(monkeypatch):
    """validkernels' loops hold validgeometry's and validindex's helpers in their cached
    machine code, so the cache is keyed on those files too (validkernels._stamped: numba
    checks only the function's own file): with other contents there, nothing is loaded."""
    from numba import njit
    validpieces._kernels()              # compiled and cached with the files as they are

    def cached():
        fresh = vk._stamped(njit(cache=True)(vk.overlapping))
        return fresh._cache._cache_file._load_index()

    assert cached()
    monkeypatch.setattr(vk, "_DEPS", (b"an edited validgeometry.py", b"validindex.py"))
    assert not cached()


def _blocks(rng, shape, most: int) -> list[Rect]:
    """A tiling of the shape by blocks of 1..most elements per dimension, row-major."""
    cuts = []
    for s in shape:
        c, at = [0], 0
        while at < s:
            at = min(s, at + rng.randint(1, most))
            c.append(at)
        cuts.append(c)
    rects = [()]
    for c in cuts:
        rects = [r + ((c[i], c[i + 1]),) for r in rects for i in range(len(c) - 1)]
    return [Rect.of(*r) for r in rects]


def _near(rng, block: Rect, shape) -> Rect:
    """A random rect of up to 4 elements per dimension starting near `block`."""
    lo = tuple(max(0, a - rng.randint(0, 3)) for a in block.lo)
    return Rect(lo, tuple(min(s, a + rng.randint(1, 4)) for a, s in zip(lo, shape)))


_FINE_SHAPES = {1: (700,), 2: (40, 24), 3: (12, 10, 9), 4: (7, 6, 5, 4)}


@pytest.mark.parametrize("tiny", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_point_by_point_writes_equal_the_oracle(seed, tiny, monkeypatch):
    """A region written block by block (hundreds of pieces, as NMT's regions written point
    by point), the blocks' size changing halfway, with holders added (replicas' reads of
    blocks, rows, random rects) and random rects and the whole rewritten now and then, the
    changes queued ~40 at a time: the grid is built, its buckets cleaned, rebuilt (drift,
    overload) and the store compacted on the way; the same pieces in the same order, and
    queries answered the same."""
    _index(monkeypatch, tiny)
    rng = random.Random(seed)
    nd = (1, 2, 2, 3, 3, 4)[seed]
    shape = _FINE_SHAPES[nd]
    region = Region("p", shape)
    a, b = RegionState(region), PieceState(region, 48)
    for st in (a, b):
        st.valid.add(region.rect, Holders([0]))
    whole = region.rect
    most = gridded = 0
    for phase in range(2):
        blocks = _blocks(rng, shape, 2 if phase == 0 else 5)
        for k, block in enumerate(blocks):
            kind = rng.random()
            if kind < 0.7:
                op = ("set", block, (rng.randrange(48),) if rng.random() < 0.8 else
                      tuple(rng.sample(range(48), rng.randint(2, 6))))
            elif kind < 0.9:
                r = rng.choice(blocks[:k + 1]) if rng.random() < 0.6 else \
                    _rand_rect(rng, shape) if rng.random() < 0.2 else _near(rng, block, shape)
                op = ("add", r, rng.randrange(48))
            elif kind < 0.97:
                op = ("set", _near(rng, block, shape), (rng.randrange(48),))
            elif kind < 0.995:
                op = ("set", _rand_rect(rng, shape), (rng.randrange(48),))
            else:
                op = ("set", whole, tuple(rng.sample(range(48), 3)))
            for st in (a, b):
                if op[0] == "set":
                    st.set_only_holder(op[1], op[2])
                else:
                    st.add_holder(op[1], op[2])
            if k % 40 == 39:
                q = _rand_rect(rng, shape)
                assert [(r, tuple(h)) for _, r, h in a.valid.overlapping(q)] == \
                    [(r, tuple(h)) for _, r, h in b.valid.overlapping(q)], f"seed {seed}"
                most = max(most, len(b.valid))
                gridded += int(b.valid.gi[vi.G_ON])
        assert [(r, tuple(h)) for _, r, h in a.valid] == \
            [(r, tuple(h)) for _, r, h in b.valid], f"seed {seed} phase {phase}"
    assert most > 150 and gridded > 0, (most, gridded)     # (the grid: at default sizes too)


def _fine_program(seed: int):
    """(machine, initial, launches) of a program whose regions are written block by block
    by launches of hundreds of points (NMT's regions written point by point), then read by
    rows, by blocks of another tiling, whole by replicas, summed and read again."""
    rng = random.Random(seed)
    machine = Machine.grid(rng.choice([2, 4]), 4)
    ndev = len(machine.devices)
    nd = rng.choice([1, 2, 2, 3])
    shape = _FINE_SHAPES[nd] if nd > 1 else (300,)
    x = Region(f"x{seed}", shape, "float32")
    g = Region(f"g{seed}", shape, "float32")
    initial = {x: [(x.rect, d) for d in rng.sample(range(ndev), 2)]}
    launches = []

    def launch(region, rects, priv, devices=None):
        points = [(RegionRequirement(region, r, priv),) for r in rects]
        devices = devices or [rng.randrange(ndev) for _ in rects]
        launches.append(IndexLaunch(f"l{len(launches)}", noop, (len(points),),
                                    lambda c, t=points: t[c[0]], devices=devices))

    launch(g, _blocks(rng, shape, rng.randint(1, 2)), WD)
    for _ in range(rng.randint(3, 6)):
        region = rng.choice([x, g])
        kind = rng.random()
        if kind < 0.35:
            launch(region, _blocks(rng, shape, rng.randint(1, 3)), rng.choice([WD, RW]))
        elif kind < 0.55:
            launch(region, _blocks(rng, shape, rng.randint(1, 8)), R)
        elif kind < 0.7:
            k = rng.randint(2, ndev)
            launch(region, [region.rect] * k, R, rng.sample(range(ndev), k))
        elif kind < 0.85:
            launch(region, _blocks(rng, shape, rng.randint(2, 8)) * 2, RED)
        else:
            launch(region, [_rand_rect(rng, shape) for _ in range(rng.randint(5, 30))], R)
    return machine, initial, launches


@pytest.mark.parametrize("block", range(2))
def test_fine_programs_plan_as_the_oracle(block, monkeypatch):
    """_fine_program's: regions of hundreds of pieces (the grid built at the default
    sizes, compactions during a launch's queued writes)."""
    planned = 0
    for seed in range(block * 12, block * 12 + 12):
        old = _planned(seed, False, monkeypatch, _fine_program)
        for tiny in (False, True):
            new = _planned(seed, True, monkeypatch, _fine_program, tiny)
            assert new == old, f"seed {seed} tiny index {tiny}"
        planned += old[0] != "error"
    assert planned >= 6


def _entries(seed: int):
    """(planner, {region name: its log as plan_alone's entries}) of a random program."""
    machine, initial, launches = _program(seed)
    planner = Planner(machine, initial)
    planner.add_launches(launches)
    logs = {}
    for name, log in planner.log.items():
        logs[name] = [(li, planner.plans[li].launch, planner.plans[li].points,
                       {name: reads} if reads else {}, {name: accesses})
                      for li, reads, accesses in log]
    return planner, logs


@pytest.mark.parametrize("block", range(2))
def test_choices_logged_and_forced_as_the_oracle(block, monkeypatch):
    """slabreplay's _RecordingPlanner logs the same choices either way, and a
    _ForcedPlanner given them back makes the same plan without counting them."""
    checked = 0
    for seed in range(block * 60, block * 60 + 60):
        try:
            planner, logs = _entries(seed)
        except PlanError:
            continue
        for name, entries in logs.items():
            got = {}
            for compiled, tiny in ((False, False), (True, False), (True, True)):
                monkeypatch.setattr(coherence, "COMPILED_READS", compiled)
                _index(monkeypatch, tiny)
                rp = _with_initial(planner, name, _RecordingPlanner)
                try:
                    plan_alone(planner, name, entries, rp)
                except PlanError as e:
                    got[compiled, tiny] = str(e)
                    continue
                forced = _with_initial(planner, name, _ForcedPlanner)
                forced.forced = [c for launch in rp.choices.values() for c in launch][::-1]
                n = len(forced.forced)
                plan_alone(planner, name, entries, forced)
                got[compiled, tiny] = (rp.choices, _state(rp), forced.forced,
                                       _state(forced)[0], dict(forced.sent.items()), n)
                checked += n
            assert got[True, False] == got[False, False], f"seed {seed} region {name}"
            assert got[True, True] == got[False, False], f"seed {seed} region {name} tiny"
    assert checked > 50


def _with_initial(planner, name, cls):
    """A `cls` planner of region `name` with its initial data (slabreplay's planners are
    made without: a slab's initial data is none)."""
    rp = cls(planner.regions[name], planner.machine)
    coherence.RegionPlanner.__init__(rp, planner.regions[name], planner.machine,
                                     planner.initial.get(name, ()))
    return rp
