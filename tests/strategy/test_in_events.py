"""The part of a run's load that stretched its task events (strategy/insitu.py in_events):
where ranks outnumber the cores, the job's own sharing of them is priced per rank
(strategy/cores.py) and lies between its events, so a long key's events are deflated only by
the load beyond what its own ranks make (docs/simulator.md, the tenth collection)."""
from types import SimpleNamespace

import pytest

from taskrt.taskgraph import TASK

from strategy.costs import Profile
from strategy.costs.profile import Measurement
from strategy.insitu import deflate_long_keys, in_events

KEY = ("conv2d", "fwd", (8, 64, 27, 27))
LONG_S = 2e-3             # a key long beside the runs' slices at any load above 1
SLICE_S = 1e-4


def test_the_load_in_the_events():
    assert in_events(1.8, 1, 2) == 1.8                  # one process: all of it
    assert in_events(1.3, 2, 2) == 1.3                  # a core per rank: all of it
    assert in_events(1.8, 4, 2) == 1.0                  # 4 ranks make up to 2 themselves
    assert in_events(2.7, 4, 2) == pytest.approx(1.35)  # the rest is load from elsewhere
    assert in_events(1.8, 4, None) == 1.8               # no per-rank sharing modelled


def run(path: str, ranks: int, events_s: list):
    """A recorded run of `ranks` ranks whose task events of KEY took `events_s`."""
    graph = SimpleNamespace(nodes=[SimpleNamespace(kind=TASK, cost_key=KEY)])
    events = [{"ph": "X", "pid": 0, "ts": 0.0, "dur": t * 1e6, "args": {"node": 0}}
              for t in events_s]
    return SimpleNamespace(path=path, ranks=ranks, graph=graph, events=events)


def priced(ranks: int, load: float, cores) -> tuple:
    """(contention returned, KEY's price) after deflate_long_keys of one run at `load`."""
    profile = Profile()
    profile.add(KEY, "cpu", Measurement(LONG_S, 4, LONG_S, LONG_S))   # its events' median
    r = run("a.json", ranks, [LONG_S] * 4)
    c = deflate_long_keys([r], profile, None, SLICE_S, {r.path: load}, cores)
    return c, profile.get(KEY, "cpu").seconds


def test_a_long_key_on_ranks_sharing_cores_keeps_its_events():
    # 4 ranks on 2 cores counted 1.8: their own sharing, priced per rank by cores.py; the
    # key's events are its work (before: 2 ms / 1.8 = 1.1 ms, and the held-out 4-rank
    # cases of the tenth collection 24% / 10% too fast by fold)
    assert priced(4, 1.8, 2) == (1.8, pytest.approx(LONG_S))
    # load from elsewhere (2.7: more than 4 ranks can make on 2 cores) stretched them
    assert priced(4, 2.7, 2) == (2.7, pytest.approx(LONG_S / 1.35))
    # one process, a core per rank, or no sharing modelled: deflated by the whole count
    for ranks, cores in ((1, 2), (2, 2), (4, None)):
        assert priced(ranks, 1.8, cores) == (1.8, pytest.approx(LONG_S / 1.8))
