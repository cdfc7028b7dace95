"""End to end through raw launches (no neural-network code) on 4 logical devices.

A blocked matrix multiply with split reduction dimensions (reduction copies + reduces, and an
all-reduce) and a 2-d stencil (halo reads across parts, alternating between two regions),
each planned once and replayed with new inputs, equal to numpy.
"""
import numpy as np
import pytest
import torch

from taskrt import (R, RED, RW, WD, ExecutionError, IndexLaunch, LocalExecutor, Machine,
                    Rect, Region, RegionRequirement, block_rect, plan)

from taskrt_helpers import block_parts

M4 = Machine.local(4)


# -- blocked matrix multiply ---------------------------------------------------------------------

def matmul_program(dtype="float64"):
    """C = A @ B (rows split 2, reduction split 2); C += 1 by column parts; D = C @ W (reduction
    split 4, every part contributes all of D); E[rows j] = relu(D - 5)[rows j] on every device
    (reads all of D everywhere: an all-reduce)."""
    A, B, C = Region("A", (8, 6), dtype), Region("B", (6, 10), dtype), Region("C", (8, 10), dtype)
    W, D, E = Region("W", (10, 4), dtype), Region("D", (8, 4), dtype), Region("E", (8, 4), dtype)

    def mm(ctx, a, b, c):
        return a @ b

    def add_one(ctx, c):
        c.add_(1)                               # in place: returns None for its RW requirement

    def relu(ctx, d, e):
        lo, hi = block_rect((8,), (4,), ctx.color).lo[0], block_rect((8,), (4,), ctx.color).hi[0]
        return torch.relu(d[lo:hi] - 5)

    launches = [
        IndexLaunch("mm1", mm, (2, 2), lambda c: [
            RegionRequirement(A, block_rect(A.shape, (2, 2), c), R),
            RegionRequirement(B, block_rect(B.shape, (2, 1), (c[1], 0)), R),
            RegionRequirement(C, block_rect(C.shape, (2, 1), (c[0], 0)), RED)],
            devices=[0, 1, 2, 3]),
        IndexLaunch("add1", add_one, (4,), lambda c: [
            RegionRequirement(C, block_rect(C.shape, (1, 4), (0, c[0])), RW)],
            devices=[0, 1, 2, 3]),
        IndexLaunch("mm2", lambda ctx, c, w, d: c @ w, (4,), lambda c: [
            RegionRequirement(C, block_rect(C.shape, (1, 4), (0, c[0])), R),
            RegionRequirement(W, block_rect(W.shape, (4, 1), (c[0], 0)), R),
            RegionRequirement(D, D.rect, RED)],
            devices=[0, 1, 2, 3]),
        IndexLaunch("relu", relu, (4,), lambda c: [
            RegionRequirement(D, D.rect, R),
            RegionRequirement(E, block_rect(E.shape, (4, 1), (c[0], 0)), WD)],
            devices=[0, 1, 2, 3]),
    ]
    initial = {A: [(A.rect, 0)], B: [(B.rect, 0)], W: [(W.rect, 0)]}
    return plan(launches, M4, initial=initial)


def matmul_numpy(a, b, w):
    c = a @ b + 1
    d = c @ w
    return c, d, np.maximum(d - 5, 0)


def test_blocked_matmul_equals_numpy_and_replays():
    g = matmul_program()
    counts = {k: {kind: sum(1 for i in ids if g.nodes[i].kind == kind)
                  for kind in ("copy", "reduce", "allreduce")}
              for k, ids in g.launch_nodes.items()}
    # Reads of C's column parts after its row-and-reduction split: per column part 4 partial
    # sums (2 row blocks x 2 contributions) meet, so reduction copies and one reduce each.
    assert counts["add1"]["reduce"] == 4 and counts["add1"]["copy"] >= 4
    assert all(c.reduction for c in (g.nodes[i] for i in g.launch_nodes["add1"])
               if c.kind == "copy")
    # Every device reads all of D, to which every device contributed: one all-reduce.
    assert counts["relu"] == {"copy": 0, "reduce": 0, "allreduce": 1}

    ex = LocalExecutor(g)
    rng = np.random.default_rng(0)
    for _ in range(2):                            # the same traced graph, new inputs each time
        a, b, w = (rng.integers(-3, 4, s).astype(np.float64) for s in ((8, 6), (6, 10), (10, 4)))
        for name, v in (("A", a), ("B", b), ("W", w)):
            ex.write(name, torch.from_numpy(v))
        ex.run()
        c, d, e = matmul_numpy(a, b, w)
        assert np.array_equal(ex.read("C").numpy(), c)     # small integers: exact
        assert np.array_equal(ex.read("D").numpy(), d)
        assert np.array_equal(ex.read("E").numpy(), e)


def test_matmul_trace_records_every_node_and_executors_agree_bitwise():
    g = matmul_program("float32")
    torch.manual_seed(0)
    inputs = {n: torch.randn(g.regions[n].shape) for n in ("A", "B", "W")}
    runs = []
    for _ in range(2):                            # two executors built from the same plan
        ex = LocalExecutor(g, record_trace=True)
        for n, v in inputs.items():
            ex.write(n, v)
        ex.run()
        runs.append({n: ex.read(n) for n in ("C", "D", "E")})
        assert [e.node for e in ex.trace] == list(range(len(g)))
        assert [e.kind for e in ex.trace] == [n.kind for n in g.nodes]
        assert all(0 <= e.start <= e.end for e in ex.trace)
        assert all(a.end <= b.start for a, b in zip(ex.trace, ex.trace[1:]))
        for e, n in zip(ex.trace, g.nodes):
            if n.kind == "copy":
                assert e.nbytes == n.nbytes and e.track == f"link {n.src}->{n.dst}"
            elif n.kind == "task":
                assert e.track == f"device {n.device}" and e.name.startswith(n.launch.name)
    for n in ("C", "D", "E"):
        assert torch.equal(runs[0][n], runs[1][n])
    c, d, e = matmul_numpy(*(inputs[n].double().numpy() for n in ("A", "B", "W")))
    assert np.allclose(runs[0]["E"].numpy(), e, rtol=1e-4, atol=1e-4)


# -- 2-d stencil ---------------------------------------------------------------------------------

N = 8


def stencil_numpy(u):
    p = np.pad(u, 1)
    return p[1:-1, 1:-1] * 2 + p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:]


def stencil_task(ctx, src, dst):
    """dst part = 2*center + 4 neighbours, from the halo view of src (zero outside the grid)."""
    halo, part = ctx.args[ctx.color]
    p = torch.zeros((part.shape[0] + 2, part.shape[1] + 2), dtype=src.dtype)
    # Place the (clipped) halo view into a padded buffer around the part.
    off = tuple(h - (q - 1) for h, q in zip(halo.lo, part.lo))
    p[off[0]:off[0] + src.shape[0], off[1]:off[1] + src.shape[1]] = src
    return p[1:-1, 1:-1] * 2 + p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:]


def stencil_program(iterations=3):
    U, V = Region("U", (N, N), "float64"), Region("V", (N, N), "float64")
    full = U.rect
    parts = dict(block_parts(U, (2, 2)))
    halos = {c: Rect(tuple(l - 1 for l in r.lo), tuple(h + 1 for h in r.hi)).intersect(full)
             for c, r in parts.items()}
    table = {c: (halos[c], r) for c, r in parts.items()}
    devices = [2 * c[0] + c[1] for c in parts]
    launches = []
    for it in range(iterations):
        for src, dst in ((U, V), (V, U)):
            launches.append(IndexLaunch(
                f"{dst.name}{it}", stencil_task, (2, 2),
                lambda c, src=src, dst=dst: [RegionRequirement(src, halos[c], R),
                                             RegionRequirement(dst, parts[c], WD)],
                devices=devices, args=table))
    initial = {U: [(r, d) for (c, r), d in zip(parts.items(), devices)]}
    return plan(launches, M4, initial=initial), parts


def test_stencil_equals_numpy_and_replays():
    g, parts = stencil_program(iterations=3)
    # Every launch copies into each part exactly its halo strips (2 edges of 4 elements and
    # a corner: 72 bytes), each element once. (Pieces may come in several copies and via a
    # neighbour that received them earlier in the same launch: see the planner's source rule.)
    full = Rect.from_shape((N, N))
    for name, ids in g.launch_nodes.items():
        assert not any(g.nodes[i].kind in ("reduce", "allreduce") for i in ids)
        cps = [g.nodes[i] for i in ids if g.nodes[i].kind == "copy"]
        assert sum(c.nbytes for c in cps) == 4 * 72, name
        for color, part in parts.items():
            dev = 2 * color[0] + color[1]
            halo = Rect(tuple(l - 1 for l in part.lo), tuple(h + 1 for h in part.hi))
            want = np.zeros((N, N), int)
            want[halo.intersect(full).slices_within(full)] = 1
            want[part.slices_within(full)] = 0
            got = np.zeros((N, N), int)
            for c in cps:
                if c.dst == dev:
                    got[c.rect.slices_within(full)] += 1
            assert np.array_equal(got, want), (name, color)
    ex = LocalExecutor(g)
    rng = np.random.default_rng(1)
    for _ in range(2):
        u0 = rng.integers(0, 10, (N, N)).astype(np.float64)
        ex.write("U", torch.from_numpy(u0))
        ex.run()
        u = u0
        for _ in range(3):
            v = stencil_numpy(u)
            u = stencil_numpy(v)
        assert np.array_equal(ex.read("V").numpy(), v)
        assert np.array_equal(ex.read("U").numpy(), u)


def test_stencil_instances_are_allocated_once():
    g, _ = stencil_program(iterations=2)
    ex = LocalExecutor(g)
    before = {k: b.tensor.data_ptr() for k, b in ex.store.instances.items()}
    ex.write("U", torch.ones(N, N, dtype=torch.float64))
    ex.run()
    ex.run()
    assert {k: b.tensor.data_ptr() for k, b in ex.store.instances.items()} == before
    # Each device holds its part plus halo of both regions: a 5x5 bounding box.
    assert all(b.tensor.shape == (5, 5) for b in ex.store.instances.values())


# -- errors while running -------------------------------------------------------------------------

X = Region("x", (4,))


def _run_one(task, priv=WD, initial=None):
    lnch = IndexLaunch("bad", task, (2,), lambda c: [
        RegionRequirement(X, Rect.of((2 * c[0], 2 * c[0] + 2)), priv)], devices=[1, 3])
    ex = LocalExecutor(plan([lnch], M4, initial=initial))
    ex.run()


def test_execution_error_names_the_task():
    def boom(ctx, x):
        if ctx.color == (1,):
            raise ValueError("boom")
    with pytest.raises(ExecutionError, match=r"task bad\[1\]@3: WD\(x\[2:4\]\) failed on device "
                                             r"3: ValueError: boom"):
        _run_one(boom)


def test_execution_error_for_wrong_return_values():
    with pytest.raises(ExecutionError, match=r"task bad\[0\]@1: WD\(x\[0:2\]\) failed on device "
                                             r"1: TypeError: task returned tuple of length 2; "
                                             r"expected 1 value"):
        _run_one(lambda ctx, x: (x, x))
    with pytest.raises(ExecutionError, match=r"Red\+\(x\[0:2\]\) failed on device 1: TypeError: "
                                             r"task returned None for a Red\+ requirement"):
        _run_one(lambda ctx, x: None, priv=RED)
