"""The reads a launch's reductions leave held (taskrt/reducedreads.py readers_hold: each
reader the only holder of all of its rect after the launch's reductions, the rects pairwise
disjoint, so no walk for copies) against walking them as any read (HELD_AFTER_REDUCTIONS
off), on random programs of sums read by partitions, by rects overlapping each other, by
several readers of one rect, onto a base and onto nothing (test_launch_reductions' programs
and test_valid_pieces' Red+-heavy ones), with the valid pieces compiled and as the RectIndex
oracle: the same graph node for node, valid pieces, pending sums, sent counts, boxes."""
from __future__ import annotations

from collections import Counter

import pytest

from taskrt import coherence, reducedreads

from test_launch_reductions import _program as sums_program
from test_valid_pieces import _planned, _red_program

_HELD: Counter = Counter()      # launches whose reads were entered held, and the reads


def _counted(monkeypatch):
    """coherence's readers_hold, counting the reads it enters in `held`."""
    inner = reducedreads.readers_hold

    def counted(held, by_rect):
        before = len(held)
        inner(held, by_rect)
        if len(held) > before:
            _HELD["launches"] += 1
            _HELD["reads"] += len(held) - before
    monkeypatch.setattr(coherence, "readers_hold", counted)


@pytest.mark.parametrize("program", [sums_program, _red_program])
@pytest.mark.parametrize("block", range(3))
def test_reads_held_after_reductions_plan_as_walked(program, block, monkeypatch):
    _counted(monkeypatch)
    _HELD.clear()
    for seed in range(block * 50, block * 50 + 50):
        for compiled in (True, False):
            monkeypatch.setattr(reducedreads, "HELD_AFTER_REDUCTIONS", False)
            old = _planned(seed, compiled, monkeypatch, program)
            monkeypatch.setattr(reducedreads, "HELD_AFTER_REDUCTIONS", True)
            new = _planned(seed, compiled, monkeypatch, program)
            assert new == old, f"seed {seed} compiled {compiled}"
    assert _HELD["launches"] > 20 and _HELD["reads"] > _HELD["launches"], _HELD
