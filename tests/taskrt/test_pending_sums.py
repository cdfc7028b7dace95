"""pendingsums.PendingSums against a brute-force model: a device's own sums are kept in a dict
while few and in an index of their own past pendingsums._OWN_SCAN, and either way of_device,
overlapping, iteration and the ids must be what one list of (id, rect, value) in insertion
order gives (the order decides the order of reductions' inputs and of the final pending
pieces). Also RegionState.set_only_holder_of against set_only_holder piece by piece."""
import random

from taskrt import Rect, Region
from taskrt import pendingsums
from taskrt.coherence import PendingSums, RegionState


def _rect(rng, shape):
    lo = [rng.randrange(0, s) for s in shape]
    hi = [l + rng.randint(1, s - l) for l, s in zip(lo, shape)]
    if rng.random() < 0.05:                 # an empty one now and then
        hi[0] = lo[0]
    return Rect(tuple(lo), tuple(hi))


def _check(sums: PendingSums, model: dict, rng, shape):
    assert list(sums) == [(i, r, v) for i, (r, v) in model.items()]
    assert len(sums) == len(model)
    for _ in range(3):
        q = _rect(rng, shape)
        want = [(i, r, v) for i, (r, v) in model.items() if r.overlaps(q)]
        assert sums.overlapping(q) == want
        for dev in range(4):
            assert sums.of_device(dev, q) == [x for x in want if x[2][0] == dev]


def test_pending_sums_match_a_plain_list_across_the_promotion():
    rng = random.Random(5)
    shape = (40, 9, 7)
    for trial in range(12):
        sums, model = PendingSums(), {}
        # Enough sums on device 0 to pass _OWN_SCAN (its own index), few on the others.
        for step in range(4 * pendingsums._OWN_SCAN):
            op = rng.random()
            if op < 0.5 or not model:
                dev = 0 if rng.random() < 0.6 else rng.randrange(1, 4)
                value = (dev, rng.random() < 0.3)
                rect = _rect(rng, shape)
                model[sums.add(rect, value)] = (rect, value)
            elif op < 0.65:
                i = rng.choice(list(model))
                sums.remove(i)
                del model[i]
            elif op < 0.8:
                i = rng.choice(list(model))
                rect = _rect(rng, shape)
                value = model.pop(i)[1]
                model[sums.replace(i, rect)] = (rect, value)
            else:
                cut = _rect(rng, shape)
                found = sums.overlapping(cut)
                sums.retire(cut, found)
                # The plain definition: each found sum loses `cut`; its pieces go last, in
                # order (new ids are the index's own, so the model takes them from it).
                gone = {i for i, _, _ in found}
                want = [(r, v) for i, (r, v) in model.items() if i not in gone]
                want += [(piece, v) for _, r, v in found for piece in r.subtract(cut)]
                assert [(r, v) for _, r, v in sums] == want
                model = {i: (r, v) for i, r, v in sums}
            if step % 7 == 0:
                _check(sums, model, rng, shape)
        _check(sums, model, rng, shape)
        assert type(sums._by_device[0]) is not dict, "device 0 never got an index"


def test_set_only_holder_of_equals_piece_by_piece():
    rng = random.Random(7)
    region = Region("g", (16, 12))
    for trial in range(200):
        a, b = RegionState(region), RegionState(region)
        for st in (a, b):
            st.held.add((3, region.rect))
        # Some valid pieces (sometimes none in the way: the one-query path).
        for _ in range(rng.randrange(0, 4) if trial % 2 else 0):
            r, dev = _rect(rng, (16, 12)), rng.randrange(4)
            a.set_only_holder(r, (dev,))
            b.set_only_holder(r, (dev,))
        rect = _rect(rng, (16, 12))
        # Disjoint pieces of `rect`: a row split.
        cuts = sorted({rect.lo[0], rect.hi[0], *[rng.randrange(rect.lo[0], rect.hi[0] + 1)
                                                 for _ in range(3)]})
        pieces = [Rect((x, rect.lo[1]), (y, rect.hi[1])) for x, y in zip(cuts, cuts[1:])]
        a.set_only_holder_of(rect, pieces, (5,))
        for p in pieces:
            b.set_only_holder(p, (5,))
        assert [(r, list(h)) for _, r, h in a.valid] == [(r, list(h)) for _, r, h in b.valid]
        assert a.held == b.held


def test_retire_of_one_rects_sums_on_several_devices_equals_the_plain_definition():
    """PendingSums.retire where runs of sums share one rect object (every device's sum of one
    time step, as an operator split in a dimension it sums over leaves them; retire then
    subtracts once per run and the pieces it leaves are shared, so later runs are of one
    object too), among other sums and equal rects that are other objects: each found sum
    loses the cut, its pieces last, in order. Guards the shared subtract taking another
    sum's pieces (a run ended by a rect of another object or value)."""
    rng = random.Random(9)
    shape = (16, 10, 6)
    for trial in range(150):
        sums = PendingSums()
        for _ in range(rng.randint(1, 8)):
            rect = _rect(rng, shape)
            devices = rng.sample(range(6), rng.randint(1, 6))
            for dev in devices:
                # the same object mostly; an equal copy, or another rect, now and then
                r = rect if rng.random() < 0.8 else (
                    Rect(rect.lo, rect.hi) if rng.random() < 0.5 else _rect(rng, shape))
                sums.add(r, (dev, rng.random() < 0.2))
        for _ in range(4):
            cut = _rect(rng, shape)
            before = list(sums)
            found = sums.overlapping(cut)
            sums.retire(cut, found)
            gone = {i for i, _, _ in found}
            want = [(r, v) for i, r, v in before if i not in gone]
            want += [(piece, v) for _, r, v in found for piece in r.subtract(cut)]
            assert [(r, v) for _, r, v in sums] == want, trial
