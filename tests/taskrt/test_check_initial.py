"""oneshot.check_initial's fast path (distinct devices and rects checked at once) against the
walk over the pieces in order (walk_initial): on random initial pieces, good and bad (devices
out of range, numpy or float; rects outside the region or of another rank; not pairs), half
of them with rect objects shared by many pieces as a replicated weight's are, both pass or
both raise the same error."""
import random

import numpy as np

from taskrt import Machine, Region
from taskrt.geometry import Rect
from taskrt.oneshot import check_initial, walk_initial


def _outcome(check, region, pieces, machine):
    try:
        check(region, pieces, machine)
    except Exception as e:          # (what a bad piece raises, by type and message)
        return type(e).__name__, str(e)
    return None


def _random_pieces(rng: random.Random, region: Region, devices: int) -> list:
    n0, n1 = region.shape
    pieces = []
    for _ in range(rng.randint(0, 12)):
        lo0, lo1 = rng.randint(0, n0), rng.randint(0, n1)
        rect = Rect((lo0, lo1), (rng.randint(lo0, n0), rng.randint(lo1, n1)))
        device = rng.randrange(devices)
        pieces.append((rect, device))
    if pieces and rng.random() < 0.5:        # a replicated weight: its rect objects again
        pieces += [(pieces[rng.randrange(len(pieces))][0], rng.randrange(devices))
                   for _ in range(rng.randint(8, 40))]
    bad = rng.random()
    if pieces and bad < 0.6:
        k = rng.randrange(len(pieces))
        rect, device = pieces[k]
        kind = rng.randrange(7)
        if kind == 0:
            pieces[k] = (rect, devices + rng.randint(0, 2))
        elif kind == 1:
            pieces[k] = (rect, -1)
        elif kind == 2:
            pieces[k] = (Rect(rect.lo, (rect.hi[0] + 1, rect.hi[1])), device)
        elif kind == 3:
            pieces[k] = (Rect((0,), (1,)), device)
        elif kind == 4:
            pieces[k] = (rect, np.int64(device))
        elif kind == 5:
            pieces[k] = (rect, float(device))
        else:
            pieces[k] = (rect, device, 0)
    return pieces


def test_check_initial_equals_the_walk_on_random_pieces():
    rng = random.Random(0)
    machine = Machine.grid(4, 1)
    region = Region("w", (6, 5))
    raised = passed = 0
    for _ in range(3000):
        pieces = _random_pieces(rng, region, len(machine.devices))
        want = _outcome(walk_initial, region, pieces, machine)
        assert _outcome(check_initial, region, pieces, machine) == want, pieces
        raised += want is not None
        passed += want is None
    assert raised > 500 and passed > 500, (raised, passed)


def test_pieces_found_fine_are_remembered_only_for_the_same_objects_and_rect():
    """check_initial with `fine` (as Planner.__init__ calls it for every region): regions
    given the very same piece objects as a region found fine before, and of its rect, pass
    unchecked; any other region (another rect, equal but other objects, pieces that failed
    before) is checked, with the walk's outcome."""
    rng = random.Random(1)
    machine = Machine.grid(4, 1)
    shapes = [(6, 5), (6, 5), (3, 5), (6, 2), (8, 8)]
    fine: set = set()
    held = []                   # (every region's pieces alive, as the planner holds them)
    raised = remembered = 0
    for _ in range(1500):
        region = Region("w", rng.choice(shapes))
        pieces = _random_pieces(rng, Region("w", (6, 5)), len(machine.devices))
        for again in range(rng.randint(1, 3)):
            if again and rng.random() < 0.3:        # equal pieces, other objects
                pieces = [tuple(list(p)) for p in pieces]
            held.append(pieces)
            other = Region(f"s{again}", rng.choice(shapes))   # (a state: maybe other shape)
            for r in (region, other):
                want = _outcome(walk_initial, r, pieces, machine)
                known = (r.rect, tuple(map(id, pieces))) in fine
                assert _outcome(lambda *a: check_initial(*a, fine), r, pieces, machine) == want
                raised += want is not None
                remembered += known
    assert raised > 500 and remembered > 500, (raised, remembered)
