"""Holder lists (taskrt/holders.py): each valid piece owns its list and a new holder is
appended in place, with a set for membership once the list is long. These check that a piece
split off keeps its own holders and that the set follows the list, through the plans they
decide (which device a copy comes from, whether one is needed, final_valid)."""
from taskrt import R, WD, Machine, Rect, Region, plan
from taskrt.holders import _LONG

from taskrt_helpers import copies, launch, one

X = Region("x", (8, 8))
FULL = X.rect
TOP, BOTTOM = Rect.of((0, 4), (0, 8)), Rect.of((4, 8), (0, 8))


def test_a_piece_split_off_keeps_its_own_holders():
    """Device 1 reads TOP of what device 0 wrote: BOTTOM is still held by 0 alone, so
    device 2's copy of it comes from 0 (device 1, which has sent less, does not hold it)."""
    g = plan([one("w", X, FULL, WD, 0),
              one("a", X, TOP, R, 1),
              one("b", X, BOTTOM, R, 2)], Machine.local(4))
    assert sorted((c.src, c.dst, c.rect) for c in copies(g)) == [(0, 1, TOP), (0, 2, BOTTOM)]
    assert g.final_valid["x"] == [(TOP, (0, 1)), (BOTTOM, (0, 2))]


def test_long_holder_lists_answer_membership_after_appends_and_splits():
    """Replicas on more than _LONG devices (a set for membership), then a reader that copies
    the value in: its second read needs no copy; a split keeps both halves' holders."""
    n = _LONG + 3
    reps = launch("rep", [[(X, FULL, WD)]] * (n - 2), list(range(n - 2)), replicas=True)
    g = plan([reps,
              one("r1", X, FULL, R, n - 2),
              one("r2", X, FULL, R, n - 2),
              one("r3", X, TOP, R, n - 1),
              launch("all", [[(X, FULL, R)]] * (n - 1), list(range(n - 1)))],
             Machine.local(n))
    assert [(c.owner, c.dst, c.rect) for c in copies(g)] == [("r1", n - 2, FULL),
                                                            ("r3", n - 1, TOP)]
    assert g.final_valid["x"] == [(TOP, tuple(range(n))), (BOTTOM, tuple(range(n - 1)))]
