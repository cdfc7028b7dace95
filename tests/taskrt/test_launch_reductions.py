"""A launch's reductions sharing what they know (coherence.RegionPlanner._reduce_for_reads
with coherence.FAST_PATHS): a reduction's base known empty without a query when no valid
piece met the launch's rects before it and no earlier reduction of the launch met its rect,
the sums the launch's reads meet taken out of the index while they are reduced and put back
once (pendingsums.LaunchSums), and found apart once (summedpieces.sums_apart, or apart but
for sums of equal rects: sums_apart_but_equal), so that each reduction's parts (less repeats)
are its summed pieces without a sweep. Against the same planner with
FAST_PATHS off (each reduction queries its base, retires its sums in the index and sweeps
its parts), on random programs of partitions' sums read by other partitions, by rects
overlapping each other, onto a base and onto nothing, with the valid pieces compiled
(validpieces.py) and as the RectIndex oracle: the same graph node for node, valid pieces,
pending sums, sent counts, buffers' boxes."""
from __future__ import annotations

import random
from collections import Counter

import pytest

from taskrt import R, RED
from taskrt import coherence, pendingsums, summedpieces

from test_valid_pieces import _KINDS, _grid, _rand_rect, launch_of, sum_regions
from test_valid_pieces import write_over
from test_valid_pieces import _planned as planned_program


def _program(seed: int):
    """(machine, initial, launches): sums of block partitions, one part per device where the
    devices suffice (sums apart), now and then each part on two devices (apart but for
    equal rects), or with random rects summed too (sums that overlap other devices'), read
    by other partitions, by random rects overlapping each other, by whole parts; some writes
    over the sums."""
    rng = random.Random(seed)
    machine, ndev, shape, x, g, initial = sum_regions(rng, seed, 8)
    launches = []
    for li in range(rng.randint(4, 12)):
        region = [g, x][li] if li < 2 else rng.choice([x, g, g])
        kind = 0 if li < 2 else rng.random()       # (g summed first: its reads have a value)
        if kind < 0.45:                             # a partition's sums
            rects = _grid(rng, shape)
            if len(rects) <= ndev:
                devices = rng.sample(range(ndev), len(rects))
            else:
                devices = [rng.randrange(ndev) for _ in rects]
            if ndev > 1 and rng.random() < 0.3:     # each rect summed on two devices
                rects = rects + rects
                devices = devices + [(d + rng.randrange(1, ndev)) % ndev for d in devices]
            if rng.random() < 0.25:                 # and sums overlapping others'
                extra = [_rand_rect(rng, shape) for _ in range(rng.randint(1, 2))]
                rects += extra
                devices += [rng.randrange(ndev) for _ in extra]
            priv = RED
        elif kind < 0.9:                            # reads of the sums
            read = rng.random()
            if read < 0.4:                          # another partition
                rects = _grid(rng, shape)
            elif read < 0.7:                        # rects overlapping each other
                rects = [_rand_rect(rng, shape) for _ in range(rng.randint(2, 4))]
            else:                                   # the whole region, by several
                rects = [region.rect] * rng.randint(1, ndev)
            devices = [rng.randrange(ndev) for _ in rects]
            priv = R
        else:                                       # a write over part of the sums
            priv, rects, devices = write_over(rng, shape, ndev)
        launches.append(launch_of(f"l{li}", region, rects, priv, devices))
    return machine, initial, launches


_SEEN: Counter = Counter()      # how often the sums met were apart


def _planned(seed: int, fast: bool, compiled: bool, monkeypatch):
    """test_valid_pieces' planning of a program (graph fingerprint and planner states), of
    this module's programs, with FAST_PATHS on or off."""
    monkeypatch.setattr(coherence, "FAST_PATHS", fast)
    return planned_program(seed, compiled, monkeypatch, program=_program)


@pytest.mark.parametrize("scan, dense", [(pendingsums._LAUNCH_SCAN, pendingsums._DENSE),
                                         (3, pendingsums._DENSE), (3, 0)])
@pytest.mark.parametrize("block", range(4))
def test_launch_reductions_plan_as_each_reduction_alone(block, scan, dense, monkeypatch):
    """(`scan`: LaunchSums' dict up to that many sums, else calls handed to PendingSums
    unless the first rect meets 1/`dense` of them: at 3 and the default most launches past
    3 sums keep the dict, at 3 and 0 most hand their calls on.)"""
    monkeypatch.setattr(pendingsums, "_LAUNCH_SCAN", scan)
    monkeypatch.setattr(pendingsums, "_DENSE", dense)
    apart = summedpieces.sums_apart

    def counted(pending, rects):
        got = apart(pending, rects)
        _SEEN["apart" if got else "not apart"] += 1
        return got

    monkeypatch.setattr(pendingsums, "sums_apart", counted)
    but_equal = summedpieces.sums_apart_but_equal

    def counted_but_equal(pending, rects):
        got = but_equal(pending, rects)
        _SEEN["apart but equal" if got else "not apart"] += 1
        _SEEN["not apart"] -= 1             # (counted by sums_apart's wrapper)
        return got

    monkeypatch.setattr(pendingsums, "sums_apart_but_equal", counted_but_equal)
    _SEEN.clear()
    _KINDS.clear()
    errors = 0
    for seed in range(block * 60, block * 60 + 60):
        for compiled in (True, False):
            old = _planned(seed, False, compiled, monkeypatch)
            new = _planned(seed, True, compiled, monkeypatch)
            assert new == old, f"seed {seed} compiled {compiled}"
        errors += old[0] == "error"
    assert errors < 30          # (most programs plan)
    assert _KINDS["reduce"] > 100 and _SEEN["apart"] > 20 and _SEEN["not apart"] > 20, _SEEN
    assert _SEEN["apart but equal"] > 5, _SEEN
