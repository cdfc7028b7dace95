"""RegionClasses.find's signature ids found by rect identities where a launch's points ask
alike (regionclasses._AlikeSignatures) are exactly those regionmemo.key_signature gives by value
(the oracle: every launch taken as if its points differed): the same id per launch and
region, so the same classes. On random launches whose rects come from a small pool of shared
objects, with fresh equal copies among them, keys that differ in one thing only (replicas,
requirement index, privilege, devices, a rect), twin regions (classes), and launches of
differing points that ask a region exactly what an alike one does; and on models that
repeat themselves."""
from __future__ import annotations

import random
import warnings

import pytest

from parallel_ops import SGD, lower
from taskrt import R, RED, RW, WD, Machine, Planner, Rect, Region
from taskrt import regionclasses
from taskrt.launchplan import by_region
from taskrt.regionclasses import RegionClasses
from taskrt.regionmemo import RegionPlanMemo

from taskrt_helpers import launches_of
from test_region_classes import alike_strategy, tower

warnings.simplefilter("ignore")

MACHINE = Machine.grid(2, 2)
NDEV = 4
REGIONS = [Region(f"r{i}", (8, 6), "float32") for i in range(6)]
TWINS = {g: Region(g.name + "_twin", g.shape, g.dtype) for g in REGIONS}
POOL = [Rect((0, 0), (8, 6)), Rect((0, 0), (4, 6)), Rect((4, 0), (8, 6)), Rect((0, 0), (8, 3)),
        Rect((2, 0), (6, 6))]


def _rect(rng) -> Rect:
    r = rng.choice(POOL)
    return Rect(r.lo, r.hi) if rng.random() < 0.15 else r     # an equal, other object


def _program(rng) -> list:
    """Launches as (points [(device, [(region, rect, privilege)])], replicas): most ask alike
    (every point the same regions in the same order, one privilege each); some are made from
    an earlier one with one thing changed; some have points that differ."""
    out = []
    for _ in range(rng.randint(10, 40)):
        if out and rng.random() < 0.4:
            points, replicas = rng.choice(out)
            points = [(d, list(reqs)) for d, reqs in points]
            change = rng.choice(("replicas", "order", "privilege", "device", "rect", "extra"))
            if change == "replicas":
                replicas = not replicas
            elif change == "order":
                for _, reqs in points:
                    reqs.reverse()
            elif change == "privilege":
                k = rng.randrange(min(len(reqs) for _, reqs in points))
                priv = rng.choice((R, RW, WD, RED))
                for _, reqs in points:
                    reqs[k] = (reqs[k][0], reqs[k][1], priv)
            elif change == "device":
                i = rng.randrange(len(points))
                points[i] = ((points[i][0] + 1) % NDEV, points[i][1])
            elif change == "rect":
                i = rng.randrange(len(points))
                k = rng.randrange(len(points[i][1]))
                region, _, priv = points[i][1][k]
                points[i][1][k] = (region, _rect(rng), priv)
            else:                           # one point asks one more region: not alike
                i = rng.randrange(len(points))
                used = {g for g, _, _ in points[i][1]}
                spare = [g for g in REGIONS if g not in used]
                if spare:
                    points[i][1].append((rng.choice(spare), _rect(rng), R))
            out.append((points, replicas))
            continue
        regions = rng.sample(REGIONS, rng.randint(1, 3))
        privs = [rng.choice((R, R, RW, WD, RED)) for _ in regions]
        n = rng.randint(1, 4)
        devices = [rng.randrange(NDEV) for _ in range(n)]
        points = [(d, [(g, _rect(rng), p) for g, p in zip(regions, privs)]) for d in devices]
        out.append((points, rng.random() < 0.2))
    return out


def _twinned(program: list) -> list:
    """Each launch followed by the same on the regions' twins (so that regions form
    classes)."""
    out = []
    for points, replicas in program:
        out.append((points, replicas))
        out.append(([(d, [(TWINS[g], r, p) for g, r, p in reqs]) for d, reqs in points],
                    replicas))
    return out


def _found(launches, machine, initial) -> tuple:
    """find's ids per launch (in order of its regions) and its classes (member lists)."""
    p = Planner(machine, initial, memo=RegionPlanMemo(0), replannable=False)
    expanded = [p._expand(launch) for launch in launches]
    rcs = RegionClasses.find(p, launches, expanded, 0)
    classes = {}
    for name, (rc, k) in rcs.of.items():
        classes[id(rc)] = rc.members
    return dict(rcs._launch_sigs), sorted(classes.values())


def _by_value(points, deferred=False, alike=False):
    return by_region(points, deferred), False


def _compare(launches, machine, initial, monkeypatch) -> tuple:
    got = _found(launches, machine, initial)
    with monkeypatch.context() as m:
        m.setattr(regionclasses, "by_region_and_alike", _by_value)
        m.setattr(regionclasses, "_table_columns", lambda launch, points: None)
        want = _found(launches, machine, initial)
    assert got == want
    return got


def test_alike_ids_equal_signature_ids_on_randomlaunches_of(monkeypatch):
    rng = random.Random(0)
    classes = ids = 0
    for _ in range(300):
        sigs, found = _compare(launches_of(_twinned(_program(rng))), MACHINE, {}, monkeypatch)
        classes += len(found)
        ids += len({s for t in sigs.values() for s in t})
    assert classes > 100 and ids > 1000, (classes, ids)         # (not vacuous)


@pytest.mark.parametrize("seed", range(6))
def test_alike_ids_equal_signature_ids_on_models_alike(seed, monkeypatch):
    model, machine = tower(), Machine.grid(4, 1)
    low = lower(model, alike_strategy(model, seed), machine, SGD(lr=0.1, momentum=0.9))
    _, found = _compare(low.launches, machine, low.initial, monkeypatch)
    assert found
