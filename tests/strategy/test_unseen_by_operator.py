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
