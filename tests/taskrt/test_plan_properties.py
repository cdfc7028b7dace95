"""Random programs of launches (hypothesis): planned copies cover exactly what a reader lacks,
and executing the graph equals a sequential numpy interpretation of the same launches.

Programs run over two small 2-d regions on 4 devices (2 ranks x 2): `x` starts valid on
random devices (initial data), `g` starts unwritten, so its first reads depend on earlier
writes or reductions. Every task computes from its color, its launch and what it read:
WD stores k + P[rect] + acc, RW adds k + acc, Red+ contributes k + P[rect] + acc, where
acc is the sum of its R views (mod 1000) and P a fixed pattern; every R/RW view is logged
and compared with the numpy state before that launch. Values are small integers in float64,
so sums are exact whatever the reduction order.
"""
from __future__ import annotations

from itertools import product

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from taskrt import (R, RED, RW, WD, IndexLaunch, LocalExecutor, Machine, Planner, Rect, Region,
                    RegionRequirement)

from taskrt_helpers import block_parts

SHAPE = (6, 5)
REGIONS = {"x": Region("x", SHAPE, "float64"), "g": Region("g", SHAPE, "float64")}
PATTERN = np.arange(30, dtype=np.float64).reshape(SHAPE)
MACHINE = Machine.grid(2, 2)
NDEV = 4


def color_index(color) -> int:
    return sum(c * 10 ** i for i, c in enumerate(color))


def halo(rect: Rect) -> Rect:
    full = Rect.from_shape(SHAPE)
    return Rect(tuple(l - 1 for l in rect.lo), tuple(h + 1 for h in rect.hi)).intersect(full)


def covered(mask, rect: Rect) -> bool:
    return bool(mask[rect.slices_within(Rect.from_shape(SHAPE))].all())


# -- drawing a program ----------------------------------------------------------------------------

@st.composite
def programs(draw):
    """A list of launch specs: (points, replicas), points = [(color, device, [(name, rect,
    privilege), ...])]. Reads only of elements written before (tracked with masks)."""
    written = {"x": np.ones(SHAPE, bool), "g": np.zeros(SHAPE, bool)}
    spec = []
    for _ in range(draw(st.integers(1, 7))):
        name = draw(st.sampled_from(["x", "g"]))
        kind = draw(st.sampled_from(["blocks", "blocks", "replicated", "halo", "map"]))
        region = REGIONS[name]
        replicas = False
        if kind in ("blocks", "halo", "map"):
            degrees = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
            parts = block_parts(region, degrees)
            if kind == "blocks" and draw(st.booleans()):           # only some of the parts
                keep = draw(st.lists(st.booleans(), min_size=len(parts), max_size=len(parts)))
                parts = [p for p, k in zip(parts, keep) if k] or parts[:1]
            rects = [(c, r if kind != "halo" else halo(r)) for c, r in parts]
        else:
            n = draw(st.integers(1, 4))
            lo = (draw(st.integers(0, 5)), draw(st.integers(0, 4)))
            hi = (draw(st.integers(lo[0] + 1, 6)), draw(st.integers(lo[1] + 1, 5)))
            rect = draw(st.sampled_from([region.rect, Rect(lo, hi)]))
            rects = [((i,), rect) for i in range(n)]
        all_read_ok = all(covered(written[name], r) for _, r in rects)
        if kind == "map":
            # Read the other region (with a halo), write this one part by part.
            src = "g" if name == "x" else "x"
            reads = [halo(r) for _, r in rects]
            if not all(covered(written[src], r) for r in reads):
                continue
            priv = draw(st.sampled_from([WD, RW] if all_read_ok else [WD]))
            points = [(c, [(src, h, R), (name, r, priv)]) for (c, r), h in zip(rects, reads)]
        else:
            if kind == "halo":
                choices = [RED] + ([R] if all_read_ok else [])
            elif kind == "replicated":
                choices = [RED, "WD-replicas"] + ([R] if all_read_ok else [])
            else:
                choices = [WD, RED] + ([R, RW] if all_read_ok else [])
            priv = draw(st.sampled_from(choices))
            if priv == "WD-replicas":
                priv, replicas = WD, True
            points = [(c, [(name, r, priv)]) for c, r in rects]
        if replicas:
            devices = draw(st.permutations(range(NDEV)))[:len(points)]
        else:
            devices = draw(st.lists(st.integers(0, NDEV - 1), min_size=len(points),
                                    max_size=len(points)))
        for (c, reqs) in points:
            for n_, r, p in reqs:
                if p is not R:
                    written[n_][r.slices_within(Rect.from_shape(SHAPE))] = True
        # Launch colors are 1-d: point i of the launch is color (i,).
        spec.append(([((i,), d, reqs) for i, ((_, reqs), d) in enumerate(zip(points, devices))],
                     replicas))
    initial_kind = draw(st.sampled_from(["one", "several", "blocks"]))
    if initial_kind == "blocks":
        part = block_parts(REGIONS["x"], (2, 2))
        initial = [(r, draw(st.integers(0, NDEV - 1))) for _, r in part]
    else:
        devs = draw(st.sets(st.integers(0, NDEV - 1), min_size=1,
                            max_size=1 if initial_kind == "one" else NDEV))
        initial = [(REGIONS["x"].rect, d) for d in sorted(devs)]
    return spec, initial


# -- the task every point runs, and the numpy model -------------------------------------------

def point_task(ctx, *views):
    li, table, log = ctx.args
    reqs = table[ctx.color]
    k = (li + 1) * 10 + (0 if ctx.launch.replicas else color_index(ctx.color))
    acc = 0.0
    for i, ((name, rect, priv), v) in enumerate(zip(reqs, views)):
        if priv in (R, RW):
            log[li, ctx.color, i] = v.clone()
        if priv is R:
            acc += float(v.sum())
    acc %= 1000
    inplace = color_index(ctx.color) % 2 == 0
    out = []
    for (name, rect, priv), v in zip(reqs, views):
        pattern = torch.from_numpy(PATTERN[rect.slices_within(Rect.from_shape(SHAPE))])
        if priv is WD:
            value = pattern + (k + acc)
            if inplace:                     # both conventions: write the view, or return
                v.copy_(value)
                value = None
            out.append(value)
        elif priv is RW:
            if inplace:
                v.add_(k + acc)
                out.append(None)
            else:
                out.append(v + (k + acc))
        elif priv is RED:
            out.append(pattern + (k + acc))
    return tuple(out) if len(out) != 1 else out[0]


def numpy_run(spec, x0):
    """The sequential meaning of the program: final values and what every read must see."""
    state = {"x": x0.copy(), "g": np.zeros(SHAPE)}
    seen = {}
    full = Rect.from_shape(SHAPE)
    for li, (points, replicas) in enumerate(spec):
        before = {n: a.copy() for n, a in state.items()}
        for color, _, reqs in points:
            k = (li + 1) * 10 + (0 if replicas else color_index(color))
            acc = sum(before[n][r.slices_within(full)].sum() for n, r, p in reqs if p is R) % 1000
            for i, (name, rect, priv) in enumerate(reqs):
                sl = rect.slices_within(full)
                if priv in (R, RW):
                    seen[li, color, i] = before[name][sl]
                if priv is WD:
                    state[name][sl] = PATTERN[sl] + k + acc
                elif priv is RW:
                    state[name][sl] += k + acc
                elif priv is RED:
                    state[name][sl] += PATTERN[sl] + k + acc
    return state, seen


def make_launches(spec, log):
    launches = []
    for li, (points, replicas) in enumerate(spec):
        table = {c: reqs for c, _, reqs in points}
        colors = [c for c, _, _ in points]
        reqs_of = {i: tuple(RegionRequirement(REGIONS[n], r, p) for n, r, p in table[c])
                   for i, c in enumerate(colors)}
        lnch = IndexLaunch(f"l{li}", point_task, (len(points),),
                           lambda color, reqs_of=reqs_of: reqs_of[color[0]],
                           devices=[d for _, d, _ in points],
                           args=(li, table, log),
                           replicas=replicas)
        launches.append(lnch)
    return launches


# -- the copies planned for reads ---------------------------------------------------------------

def cells(rects) -> list:
    out = []
    for r in rects:
        out.extend(product(*(range(l, h) for l, h in zip(r.lo, r.hi))))
    return out


def check_copies_for_reads(planner: Planner, launch: IndexLaunch) -> None:
    """Plan one launch and check the copies into each reading device against what it held."""
    states = {name: rp.state for name, rp in planner.planners.items()}
    held = {name: [(r, tuple(h)) for _, r, h in s.valid] for name, s in states.items()}
    # Pending partial sums as (rect, contributing device); the planner may tag the device.
    pending = {name: [(r, v[0] if isinstance(v, tuple) else v) for _, r, v in s.pending]
               for name, s in states.items()}
    planner.add_launch(launch)
    li = planner.index[launch.name]
    new = [n for name in planner.plans[li].read_order
           for n, _, _ in planner.region_nodes.get((li, name), ())]
    reads = {}
    for color, device, reqs in planner.plans[li].points:
        for req in reqs:
            if req.privilege.reads:
                reads.setdefault((req.region.name, device), []).append(req.rect)
    for (name, dev), rects in reads.items():
        into = [n.rect for n in new if n.kind == "copy" and not n.reduction
                and n.region.name == name and n.dst == dev]
        had = [r for r, h in held.get(name, []) if dev in h]
        need = set(cells(rects))
        if not any(p.overlaps(r) for p, _ in pending.get(name, []) for r in rects):
            # Exactly the part of the read rects the device lacked, each element once.
            got = cells(into)
            assert len(got) == len(set(got)), f"{name}@{dev}: overlapping copies {into}"
            assert set(got) == need - set(cells(had)), (name, dev, into, rects, had)
        else:
            # Partial sums were reduced first: what the device now has covers its reads (its
            # own sums may need no node when nobody else contributed), and copies stay inside
            # what it reads or reduces.
            reduced = [n.rect for n in new if n.kind == "reduce" and n.region.name == name
                       and n.device == dev] + \
                      [n.rect for n in new if n.kind == "allreduce" and n.region.name == name
                       and dev in n.devices]
            own = [r for r, d in pending.get(name, []) if d == dev]
            assert need <= set(cells(into + had + reduced + own))
            assert set(cells(into)) <= need | set(cells(reduced))


# -- the property -------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_programs_plan_and_execute_like_numpy(program):
    spec, initial = program
    log = {}
    launches = make_launches(spec, log)
    planner = Planner(MACHINE, initial={REGIONS["x"]: initial})
    for lnch in launches:
        check_copies_for_reads(planner, lnch)
    graph = planner.finish()
    # Every edge goes forward, so id order is a topological order.
    assert all(p < i for i, ps in enumerate(graph.preds) for p in ps)

    ex = LocalExecutor(graph)
    for run in range(2):                      # replay the same traced graph with new inputs
        x0 = np.random.default_rng(run).integers(0, 9, SHAPE).astype(np.float64)
        want, seen = numpy_run(spec, x0)
        log.clear()
        ex.write("x", torch.from_numpy(x0))
        ex.run()
        assert set(log) == set(seen)
        for key, value in seen.items():
            assert np.array_equal(log[key].numpy(), value), (run, key)
        for name in ("x", "g"):
            if name in graph.regions:
                assert np.array_equal(ex.read(name).numpy(), want[name]), (run, name)
