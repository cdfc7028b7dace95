"""A launch taking state from an earlier one (state_from): each point's state is the point of
the same color, on the same device. Planner._state_sources pairs a backward's points with its
forward's in order when their colors and devices are the same lists (the common case), else
point by point. Random domains and placements, checked against the pairing by color (and the
first bad point's error) made here point by point, for a one-shot and a re-plannable planner."""
import random
from itertools import product

import pytest

from taskrt import R, WD, IndexLaunch, Machine, MappingError, PlanError, Region, \
    RegionRequirement
from taskrt.planner import Planner, plan
from taskrt.region import block_rect
from taskrt.taskgraph import TaskNode

M4 = Machine.local(4)
X = Region("x", (8, 8))
Y = Region("y", (8, 8))                 # what a backward reads: no edge from the forward's X
INITIAL = {X: [(X.rect, 0)], Y: [(Y.rect, d) for d in range(4)]}


def _launch(name, domain, devices, privilege, **kw):
    region = X if privilege is WD else Y

    def projection(c):
        return (RegionRequirement(region, block_rect(region.shape, domain, c), privilege),)
    return IndexLaunch(name, lambda *a: None, domain, projection, devices=devices, **kw)


def _expected(fwd, bwd):
    """Per bwd point the index of fwd's point of its color, or the first error (class, text)."""
    colors = list(product(*(range(d) for d in fwd.domain)))
    where = {c: k for k, c in enumerate(colors)}
    out = []
    for c, d in zip(product(*(range(d) for d in bwd.domain)), bwd.devices):
        k = where.get(c)
        if k is None:
            return PlanError, f"point {c}: launch 'fwd' has no such point"
        if fwd.devices[k] != d:
            return MappingError, f"point {c} is on device {d} but its state is on device " \
                                 f"{fwd.devices[k]}"
        out.append(k)
    return out


def _cases(seed, n=60):
    rng = random.Random(seed)
    for _ in range(n):
        domain = (rng.choice([1, 2, 4]), rng.choice([1, 2]))
        devices = [rng.randrange(4) for _ in range(domain[0] * domain[1])]
        kind = rng.choice(["same", "same", "moved", "other domain", "transposed"])
        if kind == "same":
            bdomain, bdevices = domain, list(devices)
        elif kind == "moved":                   # one point on another device
            bdomain, bdevices = domain, list(devices)
            k = rng.randrange(len(bdevices))
            bdevices[k] = (bdevices[k] + rng.randrange(1, 4)) % 4
        elif kind == "transposed":              # as many points, other colors
            bdomain = (domain[1], domain[0])
            bdevices = list(devices)
        else:
            bdomain = (rng.choice([1, 2, 4]), rng.choice([1, 2]))
            bdevices = [rng.randrange(4) for _ in range(bdomain[0] * bdomain[1])]
        yield _launch("fwd", domain, devices, WD), \
            _launch("bwd", bdomain, bdevices, R, state_from="fwd")


@pytest.mark.parametrize("replannable", [False, True])
def test_state_sources_pair_points_by_color(replannable):
    checked = errors = 0
    for fwd, bwd in _cases(7 + replannable):
        want = _expected(fwd, bwd)
        p = Planner(M4, INITIAL, replannable=replannable)
        p.add_launch(fwd)
        if not replannable and checked % 2:
            p.plans[0].refs = None              # (as a one-shot plan drops them)
        points = p._expand(bwd)
        if isinstance(want, tuple):
            with pytest.raises(want[0], match=want[1].replace("(", r"\(").replace(")", r"\)")):
                p._state_sources(bwd, points)
            errors += 1
            continue
        got = p._state_sources(bwd, points)
        assert got == [(0, k) for k in want]
        if p.plans[0].refs is not None:         # (the source's own ref objects)
            assert all(a is p.plans[0].refs[k] for a, k in zip(got, want))
        checked += 1
    assert checked >= 20 and errors >= 10


def test_state_sources_in_the_graph():
    """The graph's backward task depends on its forward's task of the same color (by its
    state only: it reads another region) and on no other forward task."""
    for fwd, bwd in _cases(11, 30):
        want = _expected(fwd, bwd)
        if isinstance(want, tuple):
            with pytest.raises(want[0]):
                plan([fwd, bwd], M4, initial=INITIAL)
            continue
        g = plan([fwd, bwd], M4, initial=INITIAL)
        tasks = [n for n in g.nodes if isinstance(n, TaskNode)]
        f = [n for n in tasks if n.launch.name == "fwd"]
        b = [n for n in tasks if n.launch.name == "bwd"]
        for node, k in zip(b, want):
            assert {n.id for n in f} & set(g.preds[node.id]) == {f[k].id}
