"""A slab whose source choice differs from its class's follows the plan of another slab of its
class planned by itself (taskrt/slabreplay.py `_follow`), only where that slab made every
choice it made: then its plan is that one's, moved (slabplans.py).

`_follow` is checked on hand-made choices against a real RegionPlanner's counts (a slab
planned by itself whose earlier choices differ is not followed even where this part's
choices would come out alike; a failed try leaves the counts as they were), and slab plans
of longer random LSTM-like programs (test_slab_plans.py's, 16 steps: the counts cycle, so
many slabs follow another's plan) are compared with planning their regions whole.
"""
from __future__ import annotations

from types import SimpleNamespace

import test_slab_plans as programs
from taskrt import Machine, Region, slabplans
from taskrt.slabplans import SlabbedEnd
from taskrt.slabreplay import _NONE, _follow

REGION = Region("r", (4, 8), "float32")


def _counts(**sent):
    """A RegionPlanner's _choose_source on 2 ranks of 2 devices, with these counts sent."""
    end = SlabbedEnd(REGION, Machine.grid(2, 2))
    end.sent.update({int(k[1:]): v for k, v in sent.items()})
    return end.sent, end._choose_source


def test_a_slab_does_not_follow_a_plan_whose_earlier_choices_differ():
    # The class's plan picks device 0 in its second part (counts from zero); the region's
    # counts (device 0 has sent 5) pick 1 there, as does an own slab whose first part
    # picked another source than this slab did: its state differs, so it is not followed.
    first = [((2, 3), 2, 4, 2)]
    template = [first, [((0, 1), 0, 10, 0)]]
    other = SimpleNamespace(parts=[[((2, 3), 2, 4, 3)], [((0, 1), 0, 10, 1)]])
    sent, choose = _counts(d0=5)
    done = [first]
    assert _follow(choose, sent, done, None, template, [other]) is _NONE
    assert sent == {0: 5} and done == [first]       # (the failed tries taken back)
    # One that made this slab's first choice (an equal list, another object) is followed.
    alike = SimpleNamespace(parts=[list(first), [((0, 1), 0, 10, 1)]])
    assert _follow(choose, sent, done, None, template, [other, alike]) is alike
    assert sent == {0: 5, 1: 10} and done == [first, alike.parts[1]]


def test_a_failed_try_takes_back_its_counts():
    # The current plan's part matches its first two choices, then not: its counts are taken
    # back before the next candidate (the template) is replayed against them.
    current = SimpleNamespace(parts=[[((0, 1), 0, 3, 0), ((2, 3), 2, 7, 2),
                                      ((0, 1), 0, 9, 0)]])
    template = [[((0, 1), 0, 3, 0), ((2, 3), 2, 7, 2), ((0, 1), 0, 9, 1)]]
    sent, choose = _counts(d1=1)
    done: list = []
    assert _follow(choose, sent, done, current, template, [current]) is None
    assert sent == {0: 3, 1: 10, 2: 7} and done == [template[0]]


def test_a_failed_try_takes_back_a_pick_of_no_elements():
    # A group's picks count no elements (coherence._group_sources), so a source that had
    # sent nothing can be picked with no elements after its copies were counted: taking
    # the counts back in order empties it first, and the pick of none after must not fail.
    template = [[((1,), 0, 4, 1), ((1,), 0, 0, 1), ((2, 3), 2, 5, 3)]]
    sent, choose = _counts()
    done: list = []
    assert _follow(choose, sent, done, None, template, []) is _NONE
    assert sent == {} and done == []


def test_followed_slabs_equal_whole_plans(monkeypatch):
    steps = 16
    monkeypatch.setattr(programs, "STEPS", steps)
    for name in ("X", "H", "GX", "GH"):
        monkeypatch.setattr(programs, name, Region(name.lower(), (steps, 8, 6), "float32"))
    followed = [0]
    monkeypatch.setattr(slabplans, "FOLLOWED", followed)
    for seed in range(12):
        assert programs._plans(monkeypatch, seed, True) == \
            programs._plans(monkeypatch, seed, False), seed
    assert followed[0] > 20             # (else the comparison shows nothing)
