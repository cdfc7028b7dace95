"""taskrt/expand.py's expand (requirements by a C loop, devices checked at once, regions once
per distinct requirements tuple) against expand_walk, the point-by-point definition, on random
launches, good and bad: devices out of range, negative, float, bool or numpy; projections
returning a non-requirement; regions declared twice with other shapes; requirement tuples
shared by points; projections giving lists; a launch class with its own requirements. Both
give the same points and leave the same regions known, or raise the same error."""
import random

import numpy as np

from taskrt import R, RW, WD, IndexLaunch, Machine, Planner, Rect, Region
from taskrt.expand import expand, expand_walk
from taskrt.privilege import RegionRequirement

MACHINE = Machine.grid(4, 1)


def _random_launch(rng: random.Random, name: str) -> IndexLaunch:
    pool = [Region("a", (8, 4)), Region("b", (6,)), Region("c", (4, 4)), Region("a", (8, 4))]
    if rng.random() < 0.2:
        pool.append(Region("b", (7,)))          # declared twice, another shape
    domain = (rng.randint(1, 6),)
    shared = tuple(RegionRequirement(pool[0], Rect((0, 0), (8, 4)), R)
                   for _ in range(rng.randint(1, 2)))
    table = {}
    for color in [(i,) for i in range(domain[0])]:
        if rng.random() < 0.3:
            table[color] = shared
            continue
        reqs = []
        for _ in range(rng.randint(1, 3)):
            region = rng.choice(pool)
            lo = tuple(rng.randint(0, n - 1) for n in region.shape)
            rect = Rect(lo, tuple(rng.randint(l + 1, n) for l, n in zip(lo, region.shape)))
            reqs.append(RegionRequirement(region, rect, rng.choice([R, RW, WD])))
        if rng.random() < 0.05:
            reqs.append("not a requirement")
        table[color] = tuple(reqs)
    devices = None
    if rng.random() < 0.7:
        devices = [rng.randrange(4) for _ in range(domain[0])]
        if rng.random() < 0.4:
            k = rng.randrange(len(devices))
            devices[k] = rng.choice([4, -1, 1.0, True, np.int64(2), 7])
    projection = table.__getitem__
    if rng.random() < 0.3:          # a projection giving a fresh list per point
        projection = lambda color: list(table[color])   # noqa: E731
    return IndexLaunch(name, lambda ctx: None, domain, projection, devices=devices)


class _Doubled(IndexLaunch):
    """A launch class with its own requirements (its projection's, twice)."""
    def requirements(self, color):
        return super().requirements(color) * 2


def _outcome(fn, launch, known: list):
    planner = Planner(MACHINE)
    for region in known:
        planner._region(region)
    try:
        points = fn(planner, launch)
    except Exception as e:          # (a bad point's error, by type and message)
        got = (type(e).__name__, str(e))
    else:
        got = [(c, d, type(d).__name__, r) for c, d, r in points]
    return got, [(n, id(r)) for n, r in planner.regions.items()]


def test_expand_equals_the_walk_on_random_launches():
    rng = random.Random(0)
    raised = fine = 0
    for case in range(1500):
        launch = _random_launch(rng, f"l{case}")
        known = [Region("c", (4, 4))] if rng.random() < 0.3 else []
        want = _outcome(expand_walk, launch, known)
        assert _outcome(expand, launch, known) == want, case
        raised += type(want[0]) is tuple
        fine += type(want[0]) is list
    assert raised > 200 and fine > 200, (raised, fine)


def test_a_launch_class_with_its_own_requirements_is_asked_per_point():
    rng = random.Random(1)
    for case in range(200):
        base = _random_launch(rng, f"l{case}")
        launch = _Doubled(base.name, base.task, base.domain, base.projection,
                          devices=base.devices)
        want = _outcome(expand_walk, launch, [])
        assert _outcome(expand, launch, []) == want, case
        if type(want[0]) is list:
            assert all(len(r) % 2 == 0 for _, _, _, r in want[0])
