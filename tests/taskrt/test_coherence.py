"""Coherence: which copies, reductions and edges the planner produces, and its errors."""
import random

import pytest
import torch

from taskrt import (R, RED, RW, WD, IndexLaunch, LocalExecutor, Machine, MappingError,
                    PlanError, PrivilegeError, Rect, Region, RegionRequirement, plan)

from taskrt.summedpieces import _cross_device_overlap, summed_pieces
from taskrt.geometry import subtract_all
from taskrt.region import block_rect
from taskrt.taskgraph import ReduceTarget

from taskrt_helpers import copies, launch, nodes_of, one, task_of

M4 = Machine.local(4)
X = Region("x", (8, 8))                    # float32: 4 bytes per element
FULL = X.rect
TOP, BOTTOM = Rect.of((0, 4), (0, 8)), Rect.of((4, 8), (0, 8))


def cover(rects) -> dict:
    """{point: multiplicity} of a list of rects (to check exact, non-overlapping tiling)."""
    out = {}
    for r in rects:
        for i in range(r.lo[0], r.hi[0]):
            for j in range(r.lo[1], r.hi[1]):
                out[i, j] = out.get((i, j), 0) + 1
    return out


# -- copies ------------------------------------------------------------------------------------

def test_write_then_disjoint_reads_copy_exactly_the_intersections():
    """A writes W; B and C read rects overlapping W: one copy each of exactly W & read."""
    w = Rect.of((2, 6), (2, 6))
    rb, rc = Rect.of((0, 4), (0, 8)), Rect.of((4, 8), (3, 8))
    g = plan([one("w", X, w, WD, 0),
              launch("r", [[(X, rb, R)], [(X, rc, R)]], [1, 2])],
             M4, initial={X: [(FULL, 1), (FULL, 2)]})
    writer = task_of(g, "w")
    got = sorted((c.src, c.dst, c.rect.lo, c.rect.hi, c.nbytes, tuple(g.preds[c.id]))
                 for c in copies(g))
    assert got == [(0, 1, (2, 2), (4, 6), 2 * 4 * 4, (writer.id,)),
                   (0, 2, (4, 3), (6, 6), 2 * 3 * 4, (writer.id,))]
    for color in ((0,), (1,)):
        t = task_of(g, "r", color)
        assert g.preds[t.id] == [c.id for c in copies(g) if c.dst == t.device]
    assert g.count() == {"task": 3, "copy": 2, "reduce": 0, "allreduce": 0}


def test_write_then_overlapping_reads_tile_what_each_reader_lacks():
    """B and C read overlapping rects and hold nothing: the copies into each tile its read
    rect exactly (no element twice), the bytes add up, and A's part comes only from A or
    from a holder that got it from A within this launch."""
    w = Rect.of((2, 6), (2, 6))
    rb, rc = Rect.of((0, 4), (0, 8)), Rect.of((3, 8), (4, 8))
    g = plan([one("w", X, w, WD, 0),
              launch("r", [[(X, rb, R)], [(X, rc, R)]], [1, 2])],
             M4, initial={X: [(FULL, 3)]})
    for dev, rect in ((1, rb), (2, rc)):
        into = [c for c in copies(g) if c.dst == dev]
        assert cover(c.rect for c in into) == cover([rect])
        assert sum(c.nbytes for c in into) == X.nbytes(rect)
        for c in into:
            if c.src == 0:
                assert w.contains(c.rect)
            elif c.rect.overlaps(w):           # forwarded: A's part reached c.src first
                assert any(g.nodes[p].kind == "copy" and g.nodes[p].dst == c.src
                           for p in g.preds[c.id])
            else:
                assert c.src in (1, 3)
        t = task_of(g, "r", (0,) if dev == 1 else (1,))
        assert sorted(g.preds[t.id]) == sorted(c.id for c in into)


def test_reader_on_holder_needs_no_copy_and_readers_do_not_depend_on_each_other():
    g = plan([one("w", X, FULL, WD, 0),
              launch("r", [[(X, TOP, R)], [(X, FULL, R)], [(X, BOTTOM, R)]], [0, 0, 0]),
              launch("r2", [[(X, FULL, R)]], [0])], M4)
    w = task_of(g, "w")
    assert not copies(g)
    for n in g.tasks()[1:]:
        assert g.preds[n.id] == [w.id]


# -- reductions --------------------------------------------------------------------------------

def test_reduce_from_four_then_read_on_the_same_four_is_one_allreduce():
    g = plan([launch("red", [[(X, FULL, RED)]] * 4, [0, 1, 2, 3]),
              launch("r", [[(X, FULL, R)]] * 4, [0, 1, 2, 3])], M4)
    assert g.count() == {"task": 8, "copy": 0, "reduce": 0, "allreduce": 1}
    (ar,) = nodes_of(g, "r", "allreduce")
    assert ar.devices == (0, 1, 2, 3) and ar.rect == FULL and ar.nbytes == 256
    assert g.preds[ar.id] == [task_of(g, "red", (i,)).id for i in range(4)]
    for i in range(4):
        assert g.preds[task_of(g, "r", (i,)).id] == [ar.id]
    assert g.bytes_moved() == 2 * 3 * 256
    assert g.final_valid["x"] == [(FULL, (0, 1, 2, 3))] and not g.final_pending


def test_reduce_from_four_then_read_on_one_is_reduction_copies_and_one_reduce():
    g = plan([launch("red", [[(X, FULL, RED)]] * 4, [0, 1, 2, 3]),
              launch("r", [[(X, FULL, R)]], [2])], M4)
    assert g.count() == {"task": 5, "copy": 3, "reduce": 1, "allreduce": 0}
    rc = copies(g)
    assert all(c.reduction and c.dst == 2 and c.rect == FULL and c.nbytes == 256 for c in rc)
    assert sorted(c.src for c in rc) == [0, 1, 3]
    (red,) = nodes_of(g, "r", "reduce")
    assert red.device == 2 and red.rect == FULL
    # Inputs in device order (deterministic sums): staged 0, staged 1, then device 2's own
    # sums, which sit in its instance (x had no value, so there is no base to keep apart),
    # staged 3.
    assert [i.source for i in red.inputs] == ["staged", "staged", "instance", "staged"]
    assert sorted(g.preds[red.id]) == sorted([task_of(g, "red", (2,)).id] + [c.id for c in rc])
    assert g.preds[task_of(g, "r").id] == [red.id]
    assert g.final_valid["x"] == [(FULL, (2,))]


def test_reduce_then_read_on_a_non_contributor_and_with_a_base():
    g = plan([one("w", X, FULL, WD, 3),
              launch("red", [[(X, FULL, RED)]] * 2, [0, 1]),
              launch("r", [[(X, FULL, R)]] * 2, [2, 3])], M4)
    (red,) = nodes_of(g, "r", "reduce")
    # Not an all-reduce: the readers are not the contributors, and there is a base (the write).
    assert not nodes_of(g, "r", "allreduce")
    assert red.device == 2
    assert [i.source for i in red.inputs] == ["instance", "staged", "staged"]
    base = [c for c in copies(g, "r", reduction=False) if c.dst == 2]
    assert [(c.src, c.rect) for c in base] == [(3, FULL)]
    # The second reader gets the sum from the reducer with a plain copy.
    assert [(c.src, c.dst) for c in copies(g, "r", reduction=False) if c.dst == 3] == [(2, 3)]


def test_reads_of_quarters_after_full_reductions():
    quarters = [Rect.of((2 * i, 2 * i + 2), (0, 8)) for i in range(4)]
    g = plan([launch("red", [[(X, FULL, RED)]] * 4, [0, 1, 2, 3]),
              launch("r", [[(X, q, R)] for q in quarters], [0, 1, 2, 3])], M4)
    reds = nodes_of(g, "r", "reduce")
    assert [(n.device, n.rect) for n in reds] == list(zip(range(4), quarters))
    assert len(copies(g, "r", reduction=True)) == 12
    assert not copies(g, "r", reduction=False)


def test_two_reductions_on_one_device_are_ordered_and_accumulate():
    g = plan([one("a", X, FULL, RED, 1, task=lambda ctx, _: torch.full((8, 8), 1.0)),
              one("b", X, TOP, RED, 1, task=lambda ctx, _: torch.full((4, 8), 10.0)),
              one("r", X, FULL, R, 1)], M4)
    a, b = task_of(g, "a"), task_of(g, "b")
    assert g.preds[b.id] == [a.id]
    # a assigns into device 1's instance (x has no value yet), b accumulates onto it there.
    assert a.targets == ((ReduceTarget(FULL, partial=False, accumulate=False),),)
    assert b.targets == ((ReduceTarget(TOP, partial=False, accumulate=True),),)
    # The only contributor reads the sum: it is already in place, so no reduce node runs.
    assert not nodes_of(g, "r", "reduce") and g.preds[task_of(g, "r").id] == [a.id, b.id]
    assert not g.partial_rects
    ex = LocalExecutor(g)
    want = torch.ones(8, 8)
    want[:4] += 10
    for _ in range(2):                                       # replay: partials start afresh
        ex.run()
        assert torch.equal(ex.read("x"), want)


def test_partial_sums_onto_a_value_use_the_partial_buffer():
    g = plan([one("w", X, FULL, WD, 1, task=lambda ctx, _: torch.full((8, 8), 100.0)),
              one("a", X, TOP, RED, 1, task=lambda ctx, _: torch.full((4, 8), 1.0)),
              one("r", X, FULL, R, 1)], M4)
    # The value is its base: the sums go to the partial buffer.
    assert task_of(g, "a").targets == ((ReduceTarget(TOP, partial=True, accumulate=False),),)
    assert g.partial_rects == {("x", 1): TOP}
    (red,) = nodes_of(g, "r", "reduce")
    assert [i.source for i in red.inputs] == ["instance", "partial"]
    ex = LocalExecutor(g)
    ex.run()
    want = torch.full((8, 8), 100.0)
    want[:4] += 1
    assert torch.equal(ex.read("x"), want)


def test_write_discards_pending_partial_sums():
    g = plan([launch("red", [[(X, FULL, RED)]] * 2, [0, 1]),
              one("w", X, TOP, WD, 2),
              one("r", X, FULL, R, 3)], M4)
    (red,) = nodes_of(g, "r", "reduce")
    assert red.rect == FULL and red.device == 3
    # Only BOTTOM is still pending: the write replaced TOP.
    assert sorted((c.src, c.rect) for c in copies(g, "r", reduction=True)) == \
        [(0, BOTTOM), (1, BOTTOM)]
    assert [(c.src, c.rect) for c in copies(g, "r", reduction=False)] == [(2, TOP)]


# -- WAR / WAW -----------------------------------------------------------------------------------

def test_war_and_waw_order_is_kept():
    g = plan([one("w", X, FULL, WD, 0),
              one("r", X, FULL, R, 1),        # copy 0->1, then the read
              one("w2", X, FULL, WD, 0),      # WAW with w, WAR with the copy out of device 0
              one("w3", X, TOP, RW, 1),       # RAW and WAR/WAW on device 1's instance
              one("r2", X, FULL, R, 2)], M4)
    w, r, w2, w3, r2 = (task_of(g, n) for n in ("w", "r", "w2", "w3", "r2"))
    (c01,) = copies(g, "r")
    assert g.preds[c01.id] == [w.id] and g.preds[r.id] == [c01.id]
    assert g.preds[w2.id] == [w.id, c01.id]
    # Device 1's TOP is stale after w2: a copy brings it back (RAW on w2; WAW with the copy
    # into device 1 and WAR with the read of device 1), and w3 waits for that copy.
    (c10,) = copies(g, "w3")
    assert (c10.src, c10.dst, c10.rect) == (0, 1, TOP)
    assert g.preds[c10.id] == [c01.id, r.id, w2.id]
    assert g.preds[w3.id] == [c10.id]
    # r2 reads the newest data: TOP from device 1 (w3), BOTTOM from device 0 (w2).
    got = sorted((c.src, c.rect, tuple(g.preds[c.id])) for c in copies(g, "r2"))
    assert got == [(0, BOTTOM, (w2.id,)), (1, TOP, (w3.id,))]
    assert g.final_valid["x"] == [(TOP, (1, 2)), (BOTTOM, (0, 2))]


def test_read_write_on_same_device_chain():
    g = plan([one("w", X, FULL, WD, 0), one("rw1", X, TOP, RW, 0), one("rw2", X, TOP, RW, 0),
              one("r", X, BOTTOM, R, 0)], M4)
    w, rw1, rw2, r = (task_of(g, n) for n in ("w", "rw1", "rw2", "r"))
    assert g.preds[rw1.id] == [w.id] and g.preds[rw2.id] == [rw1.id]
    assert g.preds[r.id] == [w.id]        # BOTTOM was never touched by rw1/rw2


# -- errors ----------------------------------------------------------------------------------------

def test_reading_never_written_data_names_launch_point_region_and_rect():
    with pytest.raises(PlanError, match=r"Launch 'r' point \(0,\) on device 1 reads "
                                        r"'x'\[0:8,0:8\], but only 32 of its 64 elements were "
                                        r"ever written"):
        plan([one("w", X, TOP, WD, 0), one("r", X, FULL, R, 1)], M4)
    with pytest.raises(PlanError, match=r"Launch 'rw' point \(0,\) on device 2 reads 'x'"):
        plan([one("rw", X, TOP, RW, 2)], M4)


def test_interfering_points_raise_privilege_error():
    with pytest.raises(PrivilegeError, match=r"Launch 'bad': points \(0,\) \(WD\) and \(1,\) "
                                             r"\(WD\) both touch 'x' at \[2:4,0:8\]"):
        plan([launch("bad", [[(X, Rect.of((0, 4), (0, 8)), WD)],
                             [(X, Rect.of((2, 6), (0, 8)), WD)]], [0, 1])], M4)
    with pytest.raises(PrivilegeError, match=r"points \(0,\) \(R\) and \(1,\) \(RW\)"):
        plan([launch("bad", [[(X, FULL, R)], [(X, TOP, RW)]], [0, 1])], M4,
             initial={X: [(FULL, 0)]})
    with pytest.raises(PrivilegeError, match=r"requirements \(0,\) \(R\) and \(0,\) "
                                             r"\(Red\+\)"):
        plan([launch("bad", [[(X, FULL, R), (X, TOP, RED)]], [0])], M4,
             initial={X: [(FULL, 0)]})
    # Allowed: readers overlap, and reductions overlap, of different points and of one point
    # (a tensor used twice by one operator gets two gradient contributions).
    plan([launch("ok", [[(X, FULL, R)], [(X, TOP, R)]], [0, 1]),
          launch("ok2", [[(X, FULL, RED)], [(X, TOP, RED)]], [0, 0]),
          launch("ok3", [[(X, FULL, RED), (X, TOP, RED)]], [0])], M4,
         initial={X: [(FULL, 0)]})


def test_replica_launches():
    reps = launch("rep", [[(X, FULL, WD)]] * 3, [0, 1, 2], replicas=True)
    g = plan([reps, launch("r", [[(X, FULL, R)]] * 4, [0, 1, 2, 3])], M4)
    assert [(c.src, c.dst) for c in copies(g)] == [(0, 3)]     # only device 3 lacks it
    assert g.final_valid["x"] == [(FULL, (0, 1, 2, 3))]
    with pytest.raises(PrivilegeError, match=r"points \(0,\) \(WD\) and \(1,\) \(WD\)"):
        plan([launch("rep", [[(X, FULL, WD)]] * 2, [0, 1])], M4)      # not marked replicas
    with pytest.raises(PrivilegeError, match=r"points \(0,\) \(WD\) and \(1,\) \(WD\)"):
        plan([launch("rep", [[(X, FULL, WD)]] * 2, [1, 1], replicas=True)], M4)  # one device
    with pytest.raises(PrivilegeError, match=r"points \(0,\) \(WD\) and \(1,\) \(WD\)"):
        plan([launch("rep", [[(X, FULL, WD)], [(X, TOP, WD)]], [0, 1], replicas=True)], M4)


def test_state_from_pairs_points_and_reports_mismatches():
    fwd = launch("fwd", [[(X, TOP, WD)], [(X, BOTTOM, WD)]], [0, 1])
    bwd = launch("bwd", [[(X, BOTTOM, R)], [(X, TOP, R)]], [0, 1], state_from="fwd")
    g = plan([fwd, bwd], M4)
    for c in ((0,), (1,)):
        assert task_of(g, "fwd", c).id in g.preds[task_of(g, "bwd", c).id]
    with pytest.raises(MappingError, match=r"Launch 'bwd' point \(1,\) is on device 2 but its "
                                           r"state is on device 1 \(from 'fwd'\)"):
        plan([fwd, launch("bwd", [[(X, BOTTOM, R)], [(X, TOP, R)]], [0, 2],
                          state_from="fwd")], M4)
    with pytest.raises(PlanError, match=r"state_from='nope' names no earlier launch"):
        plan([fwd, launch("bwd", [[(X, TOP, R)]], [0], state_from="nope")], M4)
    with pytest.raises(PlanError, match=r"Launch 'bwd' point \(2,\): launch 'fwd' has no such "
                                        r"point"):
        plan([fwd, launch("bwd", [[(X, TOP, R)]] * 3, [0, 1, 2], state_from="fwd")], M4)


def test_other_user_errors():
    with pytest.raises(PlanError, match=r"Launch 'a' added twice"):
        plan([one("a", X, FULL, WD, 0), one("a", X, FULL, WD, 0)], M4)
    with pytest.raises(PlanError, match=r"Region 'x' is declared twice with different shapes"):
        plan([one("a", X, FULL, WD, 0), one("b", Region("x", (4,)), Rect.of((0, 4)), WD, 0)],
             M4)
    with pytest.raises(PlanError, match=r"\(8, 8\) float32 vs \(8, 8\) float64"):
        plan([one("a", X, FULL, WD, 0), one("b", Region("x", (8, 8), "float64"), FULL, R, 0)],
             M4)
    with pytest.raises(MappingError, match=r"Launch 'a' point \(0,\): mapped to device 7, "
                                           r"which does not exist"):
        plan([one("a", X, FULL, WD, 7)], M4)
    with pytest.raises(MappingError, match=r"Launch 'a': 1 devices for 2 points"):
        IndexLaunch("a", None, (2,), lambda c: [], devices=[0])
    with pytest.raises(MappingError, match=r"domain \(2, 0\) has an empty dimension"):
        IndexLaunch("a", None, (2, 0), lambda c: [])
    with pytest.raises(PrivilegeError, match=r"projection returned 'oops'"):
        plan([IndexLaunch("a", None, (1,), lambda c: ["oops"])], M4)
    with pytest.raises(PrivilegeError, match=r"rect \[0:9,0:8\] is not inside the region"):
        RegionRequirement(X, Rect.of((0, 9), (0, 8)), R)
    with pytest.raises(PlanError, match=r"Initial data of 'x': \[0:9,0:8\] is outside"):
        plan([], M4, initial={X: [(Rect.of((0, 9), (0, 8)), 0)]})
    with pytest.raises(MappingError, match=r"device 9 does not exist"):
        plan([], M4, initial={X: [(FULL, 9)]})


def test_points_without_devices_spread_in_blocks():
    l8 = IndexLaunch("a", None, (8,), lambda c: [RegionRequirement(X, Rect.of(
        (c[0], c[0] + 1), (0, 8)), WD)])
    g = plan([l8], M4)
    assert [n.device for n in g.tasks()] == [0, 0, 1, 1, 2, 2, 3, 3]


def test_reduce_keeps_base_holders_and_unwritten_elements_unwritten():
    """A reduce only changes who holds the elements it summed partials into."""
    y = Region("y", (8,))
    # Partial sums on y[0:2] only: reading y[0:8] still reads 6 never-written elements.
    with pytest.raises(PlanError, match=r"reads 'y'\[0:8\], but only 2 of its 8 elements"):
        plan([one("red", y, Rect.of((0, 2)), RED, 0), one("r", y, Rect.of((0, 8)), R, 1)], M4)
    # Device 0 holds all of y; device 1 reduces y[0:4]: device 0 keeps y[2:4] (no partial
    # sums there), so its own read needs no copy back and does not wait for the reduce.
    g = plan([one("red", y, Rect.of((0, 2)), RED, 0),
              launch("r", [[(y, Rect.of((0, 4)), R)], [(y, Rect.of((2, 8)), R)]], [1, 0])],
             M4, initial={y: [(y.rect, 0)]})
    assert [(c.src, c.dst, c.rect) for c in copies(g, "r", reduction=False)] == \
        [(0, 1, Rect.of((0, 4)))]
    assert g.preds[task_of(g, "r", (1,)).id] == []
    assert g.final_valid["y"] == [(Rect.of((0, 2)), (1,)), (Rect.of((2, 4)), (0, 1)),
                                  (Rect.of((4, 8)), (0,))]


def test_sums_onto_a_fragmented_value_are_one_piece_per_contributor():
    """Where the value a Red+ adds to is spread over several holders, each contribution is
    still one partial sum: one reduction copy per contributor, not one per value piece."""
    quarters = [Rect.of((2 * i, 2 * i + 2), (0, 8)) for i in range(4)]
    g = plan([launch("w", [[(X, q, WD)] for q in quarters], [0, 1, 2, 3]),
              launch("red", [[(X, FULL, RED)]] * 2, [0, 1]),
              one("r", X, FULL, R, 2)], M4)
    assert [t.targets for t in nodes_of(g, "red", "task")] == \
        [((ReduceTarget(FULL, partial=True, accumulate=False),),)] * 2
    assert sorted((c.src, c.rect) for c in copies(g, "r", reduction=True)) == \
        [(0, FULL), (1, FULL)]
    (red,) = nodes_of(g, "r", "reduce")
    assert [i.source for i in red.inputs].count("staged") == 2


def test_summed_pieces_equal_the_plain_definition():
    """summedpieces.summed_pieces (one device's sums taken as they are, a sum compared only
    with other devices' pieces) gives the pieces, in order, of the plain definition: each
    sum's part of the rect less every earlier piece. Sums drawn as the planner keeps them:
    disjoint per device, overlapping across devices; one device alone, and several; one
    partition's parts spread over devices (no two overlap: taken as they are)."""
    rng = random.Random(11)
    shape = (8, 12, 6)
    for trial in range(600):
        contribs = []
        if trial % 2:
            # One partition's parts on several devices (a gradient's sums from the parts
            # of another config), sometimes a part of it on one more device too.
            degrees = tuple(rng.choice([1, 2, 3, 4]) for _ in shape)
            colors = [(a, b, c) for a in range(degrees[0]) for b in range(degrees[1])
                      for c in range(degrees[2])]
            for color in colors:
                contribs.append((len(contribs), block_rect(shape, degrees, color),
                                 (rng.randrange(4, 10), rng.random() < 0.5)))
            for color in rng.sample(colors, rng.choice([0, 0, 1])):
                contribs.append((len(contribs), block_rect(shape, degrees, color),
                                 (10, rng.random() < 0.5)))
        for device in rng.sample(range(4), rng.choice([1, 1, 2, 3]) if trial % 2 == 0
                                 else rng.choice([0, 0, 1])):
            degrees = tuple(rng.choice([1, 2, 3, 4]) for _ in shape)
            colors = [(a, b, c) for a in range(degrees[0]) for b in range(degrees[1])
                      for c in range(degrees[2])]
            for color in rng.sample(colors, rng.randint(1, len(colors))):
                contribs.append((len(contribs), block_rect(shape, degrees, color),
                                 (device, rng.random() < 0.5)))
        rng.shuffle(contribs)
        lo = tuple(rng.randrange(0, s) for s in shape)
        rect = Rect(lo, tuple(rng.randrange(l + 1, s + 1) for l, s in zip(lo, shape)))
        contribs = [c for c in contribs if c[1].overlaps(rect)]
        if not contribs:
            continue
        plain: list = []
        for _, r, _ in contribs:
            plain += subtract_all(r.intersect(rect), [q for q in plain if q.overlaps(r)])
        assert summed_pieces(rect, contribs) == plain, trial


def test_summed_pieces_of_one_rect_summed_on_several_devices():
    """summed_pieces where several devices each hold a sum of the same rect (an operator
    split in a dimension it sums over: NMT's LSTM split in its hidden units gives every
    time step's input gradient once per device), step by step, read across steps and
    parts, with other devices' sums of other partitions in between: the plain
    definition's pieces, in order. Guards looking the pieces found so far up by each sum's
    part of the rect (an equal piece found by the index's exact lookup alone)."""
    rng = random.Random(5)
    shape = (12, 10, 8)
    for trial in range(300):
        contribs = []
        degrees = tuple(rng.choice([1, 2, 3, 4]) for _ in shape)
        colors = [(a, b, c) for a in range(degrees[0]) for b in range(degrees[1])
                  for c in range(degrees[2])]
        devices = rng.sample(range(8), rng.randint(2, 5))
        for color in rng.sample(colors, rng.randint(1, len(colors))):
            for device in devices:
                contribs.append((len(contribs), block_rect(shape, degrees, color),
                                 (device, rng.random() < 0.3)))
            if rng.random() < 0.3:          # another partition's sum on another device
                other = tuple(rng.choice([1, 2]) for _ in shape)
                color = tuple(rng.randrange(k) for k in other)
                contribs.append((len(contribs), block_rect(shape, other, color),
                                 (8 + len(contribs), False)))
        lo = tuple(rng.randrange(0, s) for s in shape)
        hi = tuple(rng.randrange(a + 1, s + 1) for a, s in zip(lo, shape))
        rect = Rect(lo, hi) if trial % 4 else Rect((0, 0, 0), shape)
        contribs = [c for c in contribs if c[1].overlaps(rect)]    # (a reduction's sums)
        if not contribs:
            continue
        plain: list = []
        for _, r, _ in contribs:
            plain += subtract_all(r.intersect(rect), [q for q in plain if q.overlaps(r)])
        assert summed_pieces(rect, contribs) == plain, trial


def test_cross_device_overlap_equals_comparing_every_pair():
    """summedpieces._cross_device_overlap against every pair of parts: each device's parts
    (one per time step) within its block of rows, the devices' blocks side by side (a
    gradient's sums over a sequence on the devices of a batch split: the sweep runs along
    the rows), and at random a stray part of some device anywhere (straddling blocks,
    inside another device's). Guards the one-pass test before the sweep (the device that
    set the latest end must be the one whose parts skip the check)."""
    rng = random.Random(3)
    shape = (12, 3, 4)
    met = 0
    for trial in range(3000):
        devices = rng.randint(1, 4)
        parts = []
        for dev in range(devices):
            for t in range(shape[1]):
                lo = (rng.randrange(3 * dev, 3 * dev + 3), t, rng.randrange(shape[2]))
                hi = (rng.randrange(lo[0] + 1, 3 * dev + 4), t + 1,
                      rng.randrange(lo[2] + 1, shape[2] + 1))
                parts.append((Rect(lo, hi), dev))
        for _ in range(rng.choice([0, 1, 1, 2])):
            lo = tuple(rng.randrange(k) for k in shape)
            hi = tuple(rng.randrange(a + 1, k + 1) for a, k in zip(lo, shape))
            parts.append((Rect(lo, hi), rng.randrange(devices + 1)))
        rng.shuffle(parts)
        pairs = any(p.overlaps(q) for i, (p, a) in enumerate(parts)
                    for q, b in parts[i + 1:] if a != b)
        met += pairs
        assert _cross_device_overlap(Rect((0, 0, 0), shape), parts) == pairs, trial
    assert 500 < met < 2500
    # A part of the first device inside the second's rows, after the second's part there.
    a, b, c = Rect.of((0, 3), (0, 1), (0, 4)), Rect.of((3, 6), (0, 1), (0, 4)), \
        Rect.of((4, 5), (0, 1), (0, 4))
    assert _cross_device_overlap(Rect((0, 0, 0), shape), [(a, 0), (b, 1), (c, 0)])


def test_a_devices_sums_enter_a_reduction_in_the_order_of_their_rects_not_their_parts():
    """A reduction's inputs are in (device, the sum's lo) order: the order of the sums, not of
    their parts of the read rect (which can differ: a sum starting in an earlier row can
    reach the read rows at a later column). Guards reusing the parts for the sort."""
    a, b = Rect.of((0, 4), (6, 8)), Rect.of((1, 4), (0, 6))       # disjoint, both on device 1
    read = Rect.of((2, 4), (0, 8))
    g = plan([one("a", X, a, RED, 1), one("b", X, b, RED, 1), one("c", X, FULL, RED, 0),
              one("r", X, read, R, 0)], M4)
    (red,) = nodes_of(g, "r", "reduce")
    assert [(i.source, i.rect) for i in red.inputs] == [
        ("instance", read), ("staged", a.intersect(read)), ("staged", b.intersect(read))]
    assert [c.rect for c in copies(g, "r", reduction=True)] == [a.intersect(read),
                                                                b.intersect(read)]
