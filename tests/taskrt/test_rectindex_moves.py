"""RectIndex.renew and RectIndex.replace against remove + add on a brute-force model: the
planner uses them where it replaced a piece, and the order items come back in (insertion
order) decides the order of copies, so a moved item must come back where remove + add puts
it. Enough items that the grid is built, rebuilt and dropped. Also an index kept without
its rect -> id table (exact=False, PendingSums'), which must answer alike."""
import pytest
from hypothesis import given, settings, strategies as st

from taskrt import Rect
from taskrt.rectindex import RectIndex


@st.composite
def rects(draw, ndim):
    kind = draw(st.sampled_from(["small", "medium", "big", "empty"]))
    lo, hi = [], []
    for _ in range(ndim):
        a = draw(st.integers(-20, 60))
        b = a + {"small": draw(st.integers(1, 3)), "medium": draw(st.integers(4, 16)),
                 "big": draw(st.integers(30, 90)), "empty": -draw(st.integers(0, 3))}[kind]
        lo.append(a)
        hi.append(b)
    return Rect(tuple(lo), tuple(hi))


@st.composite
def move_ops(draw):
    ndim = draw(st.integers(1, 3))
    first = draw(st.lists(rects(ndim), min_size=30, max_size=60))
    ops = draw(st.lists(st.tuples(
        st.sampled_from(["add", "remove", "query", "renew", "renew_value", "replace"]),
        rects(ndim), st.integers(0, 1000)), min_size=1, max_size=80))
    return first, ops


def check(index, model, rect):
    want = [(i, r, v) for i, (r, v) in model.items() if r.overlaps(rect)]
    assert index.overlapping(rect) == want
    assert list(index) == [(i, r, v) for i, (r, v) in model.items()]


@pytest.mark.parametrize("exact", [True, False])
@settings(max_examples=60, deadline=None)
@given(move_ops())
def test_renew_and_replace_equal_remove_then_add(exact, case):
    first, ops = case
    index = RectIndex(exact=exact)
    model: dict = {}
    for k, r in enumerate(first):
        model[index.add(r, ("v", k))] = (r, ("v", k))
    for op, rect, k in ops:
        if op == "add":
            model[index.add(rect, ("v", k))] = (rect, ("v", k))
        elif op == "query":
            check(index, model, rect)
        elif model:
            i = list(model)[k % len(model)]
            r, v = model.pop(i)
            if op == "remove":
                index.remove(i)
            elif op == "renew":
                model[index.renew(i)] = (r, v)
            elif op == "renew_value":
                model[index.renew(i, ("w", k))] = (r, ("w", k))
            else:
                model[index.replace(i, rect, ("w", k))] = (rect, ("w", k))
        check(index, model, rect)
    for i, (r, _) in model.items():
        if not exact:
            break
        j = index.find_exact(r)            # (the latest item of that rect, if not removed)
        assert j is None or model[j][0] == r
