"""Keys no run timed, bounded by their operator's in-situ work per FLOP at the shapes the
runs did time (strategy/insitu.py price_unseen_by_operator; docs/simulator.md, 2026-12-03)."""
import pytest

from strategy.costs import Measurement, Profile
from strategy.costs.profile import Work
from strategy.insitu import price_unseen_by_operator


def test_unseen_keys_are_bounded_by_their_operators_work_per_flop():
    """A key no run timed whose price from the profiler (here 500 us) is above what the
    same operator's timed shapes do per FLOP (100 us for 1 MFLOP: 200 us for 2 MFLOP) gets
    that bound; one already below keeps its price, as do other operators' keys and keys
    without work."""
    op, other = ("conv2d", (("k", "3"),), "bwd"), ("linear", (), "bwd")
    keys = {"seen": (op, ("a",)), "high": (op, ("b",)), "low": (op, ("c",)),
            "other": (other, ("d",)), "nowork": (op, ("e",))}
    base, prof = Profile(), Profile()
    for name, price, flops in (("seen", 1e-4, 1e6), ("high", 5e-4, 2e6), ("low", 1.5e-4, 2e6),
                               ("other", 5e-4, 2e6), ("nowork", 5e-4, None)):
        k = keys[name]
        base.add(k, "cpu", Measurement(price, 5, price, price),
                 Work(flops, 0) if flops else None)
        prof.add(k, "cpu", Measurement(price, 5, price, price))
    assert price_unseen_by_operator(prof, base, {keys["seen"]}) == 1
    assert prof.get(keys["high"], "cpu").seconds == pytest.approx(2e-4)
    for name, price in (("seen", 1e-4), ("low", 1.5e-4), ("other", 5e-4), ("nowork", 5e-4)):
        assert prof.get(keys[name], "cpu").seconds == pytest.approx(price)


def test_three_timed_shapes_give_the_operators_line():
    """With three or more timed shapes the bound is the line work = a + b x FLOPs through
    them (here 10 us + 1 us per MFLOP), so a small shape keeps its fixed cost."""
    op = ("conv2d", (), "fwd")
    base, prof = Profile(), Profile()
    seen = set()
    for i, mf in enumerate((1, 2, 4)):
        k = (op, (f"s{i}",))
        w = 1e-5 + 1e-6 * mf
        base.add(k, "cpu", Measurement(w, 5, w, w), Work(mf * 1e6, 0))
        prof.add(k, "cpu", Measurement(w, 5, w, w))
        seen.add(k)
    u = (op, ("u",))
    base.add(u, "cpu", Measurement(1e-3, 5, 1e-3, 1e-3), Work(8e6, 0))
    prof.add(u, "cpu", Measurement(1e-3, 5, 1e-3, 1e-3))
    price_unseen_by_operator(prof, base, seen)
    assert prof.get(u, "cpu").seconds == pytest.approx(1e-5 + 8e-6)


def _timed_shapes(op, shapes, work_s):
    """base and in-situ profiles holding `shapes` ((FLOPs, bytes) each) of operator `op`,
    each timed at work_s(FLOPs, bytes), and the set of their keys."""
    base, prof, seen = Profile(), Profile(), set()
    for i, (f, b) in enumerate(shapes):
        k = (op, (f"s{i}",))
        w = work_s(f, b)
        base.add(k, "cpu", Measurement(w, 5, w, w), Work(f, b))
        prof.add(k, "cpu", Measurement(w, 5, w, w))
        seen.add(k)
    return base, prof, seen


def test_a_shape_moving_more_bytes_per_flop_is_bounded_by_flops_and_bytes():
    """The timed shapes take 10 us + 1 us per MFLOP + 1 us per 100 KB (a convolution's
    multiply-adds and its input's im2col copies). A shape of 2 MFLOP moving 2 MB (a quarter
    of the output channels of a 8 MFLOP shape, the whole input) takes 32 us by them; by
    FLOPs alone the line through the timed shapes says far less. Its profiler price (1 ms)
    is lowered to the FLOPs-and-bytes bound, not the FLOPs one; a shape whose FLOPs bound is
    the higher keeps that."""
    def work_s(f, b):
        return 1e-5 + 1e-6 * f / 1e6 + 1e-6 * b / 1e5
    op = ("conv2d", (), "fwd")
    shapes = [(1e6, 1e5), (2e6, 1.5e5), (4e6, 3e5), (8e6, 5e5), (8e6, 7e5)]
    base, prof, seen = _timed_shapes(op, shapes, work_s)
    for name, (f, b) in (("bytes", (2e6, 2e6)), ("flops", (16e6, 1e5))):
        k = (op, (name,))
        base.add(k, "cpu", Measurement(1e-3, 5, 1e-3, 1e-3), Work(f, b))
        prof.add(k, "cpu", Measurement(1e-3, 5, 1e-3, 1e-3))
    price_unseen_by_operator(prof, base, seen)
    assert prof.get((op, ("bytes",)), "cpu").seconds == pytest.approx(work_s(2e6, 2e6),
                                                                      rel=1e-6)
    assert prof.get((op, ("flops",)), "cpu").seconds > work_s(16e6, 1e5)


def test_a_shape_beyond_the_timed_bytes_per_flop_keeps_its_price_where_bytes_are_not_priced():
    """The timed shapes move 0.04-0.047 bytes a FLOP and take 10 us + 1 us per MFLOP: their
    line cannot tell bytes from FLOPs and prices none. A shape of 45 MFLOP moving 6.4 MB
    (0.14 bytes a FLOP: AlexNet's first convolution with a few output channels a device,
    im2col reading the whole input) keeps its profiler price (2.5 ms) instead of the 55 us
    its FLOPs give; shapes of the same FLOPs within the timed bytes per FLOP, or near them
    (3 MB: 1.5x the timed most), are bounded."""
    def work_s(f, b):
        return 1e-5 + 1e-6 * f / 1e6
    op = ("conv2d", (), "fwd")
    shapes = [(8e6, 0.32e6), (16e6, 0.7e6), (32e6, 1.4e6), (64e6, 2.9e6), (48e6, 2.0e6)]
    base, prof, seen = _timed_shapes(op, shapes, work_s)
    for name, (f, b) in (("beyond", (45e6, 6.4e6)), ("within", (45e6, 2.0e6)),
                         ("near", (45e6, 3.0e6))):
        k = (op, (name,))
        base.add(k, "cpu", Measurement(2.5e-3, 5, 2.5e-3, 2.5e-3), Work(f, b))
        prof.add(k, "cpu", Measurement(2.5e-3, 5, 2.5e-3, 2.5e-3))
    assert price_unseen_by_operator(prof, base, seen) == 2
    assert prof.get((op, ("beyond",)), "cpu").seconds == pytest.approx(2.5e-3)
    for name in ("within", "near"):
        assert prof.get((op, (name,)), "cpu").seconds == pytest.approx(work_s(45e6, 0))


def _layer_norm_stats(short=None):
    """The Transformer's layer norm statistics on 2 ranks (acc-1206b, 2 x 1): timed with half
    the features a device (a strided part: 27 us alone, 80 us in situ, 18 KB) and with all
    of them (1.3 us alone, 6.2 us in situ, 34 KB); an unseen 16 x 8 x 32 part (17 KB, 1.25
    us alone) priced 28 us by the line of all operators' keys. Returns its price after
    price_unseen_by_operator."""
    op = ("layernorm.stats", (("features", "32"),), "fwd")
    base, prof = Profile(), Profile()
    for name, alone, insitu, nbytes in (("split", 27e-6, 80e-6, 18432),
                                        ("whole", 1.27e-6, 6.2e-6, 34816),
                                        ("unseen", 1.25e-6, 28e-6, 17408)):
        base.add((op, (name,)), "cpu", Measurement(alone, 5, alone, alone), Work(0, nbytes))
        prof.add((op, (name,)), "cpu", Measurement(insitu, 5, insitu, insitu))
    seen = {(op, ("split",)), (op, ("whole",))}
    if short is None:
        price_unseen_by_operator(prof, base, seen)
    else:
        price_unseen_by_operator(prof, base, seen, short)
    return prof.get((op, ("unseen",)), "cpu").seconds


def test_a_short_unseen_key_is_bounded_by_the_timed_shape_nearest_in_time_alone():
    """By bytes the nearest timed shape is the strided one (80 us for 18 KB: 75 us for the
    unseen part, above its 28 us); by its time alone the nearest is the whole-feature one,
    which ran 6.2 / 1.27 times slower in situ than alone: 1.25 us x that = 6.1 us (its own
    runs timed 5.3 us)."""
    assert _layer_norm_stats() == pytest.approx(1.25e-6 * 6.2 / 1.27)


def test_a_key_long_in_the_profiler_is_not_bounded_by_its_time_alone():
    """Where the profiler's fastest repeat of a key is at least `short` (deflate: a slice /
    (load - 1), one preemption expected in it) its time alone is not its work: the key keeps
    its price (no timed shape bounds it by bytes either)."""
    assert _layer_norm_stats(short=1e-6) == pytest.approx(28e-6)


def test_an_operator_with_flops_keeps_its_bound_by_flops():
    """Only operators sized by their bytes are bounded by time alone: an unseen 1 MFLOP
    shape (10 us alone, priced 150 us) of an operator timed at 1 MFLOP (100 us alone and in
    situ) and 2 MFLOP (10 us alone and in situ) gets the FLOPs bound (100 us), not the 10 us
    its time alone and the 2 MFLOP shape's ratio give."""
    op = ("conv2d", (), "bwd")
    base, prof = Profile(), Profile()
    for name, alone, insitu, flops in (("one", 1e-4, 1e-4, 1e6), ("two", 1e-5, 1e-5, 2e6),
                                       ("unseen", 1e-5, 1.5e-4, 1e6)):
        base.add((op, (name,)), "cpu", Measurement(alone, 5, alone, alone), Work(flops, 0))
        prof.add((op, (name,)), "cpu", Measurement(insitu, 5, insitu, insitu))
    price_unseen_by_operator(prof, base, {(op, ("one",)), (op, ("two",))})
    assert prof.get((op, ("unseen",)), "cpu").seconds == pytest.approx(1e-4)
