"""The preemption slice a prediction on ranks outnumbering the cores draws: the mean wait of a
message for its idle receiver in the calibrating runs where longer than the task events' slice
(strategy/cores.py waiting_slice), from hand-built timelines; the events' where each rank has
a core."""
from types import SimpleNamespace

import pytest

from strategy.cores import IDLE_S, receive_latencies, waiting_slice
from taskrt.taskgraph import COPY, TASK

MS = 1e-3


def graph(*copies):
    """Nodes: a task (id 0), then copies (src device, dst device) with ids 1, 2, ..."""
    nodes = [SimpleNamespace(id=0, kind=TASK)]
    nodes += [SimpleNamespace(id=i, kind=COPY, src=s, dst=d) for i, (s, d) in enumerate(copies, 1)]
    return SimpleNamespace(nodes=nodes)


def ev(rank, node, start_ms, end_ms):
    return {"ph": "X", "pid": rank, "ts": start_ms * 1e3, "dur": (end_ms - start_ms) * 1e3,
            "args": {"node": node}}


def test_a_message_waits_from_its_send_or_its_receivers_last_event_to_its_receive():
    g = graph((0, 1), (1, 0), (0, 1), (2, 3))
    events = [
        ev(1, 0, 0.0, 0.5),                       # rank 1 works until 0.5 ms, then waits
        ev(0, 1, 0.9, 1.0), ev(1, 1, 1.4, 1.5),   # sent at 1.0, received 1.4: waited 0.4 ms
        ev(0, 0, 1.0, 3.0),                       # rank 0 busy until 3.0
        ev(1, 2, 1.5, 1.6), ev(0, 2, 3.0, 3.1),   # rank 0 busy when it came: not a wait
        ev(0, 3, 3.1, 3.2), ev(1, 0, 3.3, 4.0),   # rank 1 busy again from 3.3 ...
        ev(1, 3, 4.1, 4.2),                       # ... idle from 4.0: waited 0.1 ms, not 0.9
    ]
    got = receive_latencies(g, events, per_rank=1)
    assert got == [pytest.approx(0.4 * MS), pytest.approx(0.1 * MS)]
    # devices 0, 1 on rank 0 and 2, 3 on rank 1: copies 1-3 stay within rank 0 (no message),
    # copy 4 (device 2 -> 3) too
    assert receive_latencies(g, events, per_rank=2) == []


def test_a_receive_right_after_the_receivers_last_event_is_no_wait():
    g = graph((0, 1))
    just = [ev(1, 0, 0.0, 1.0), ev(0, 1, 0.0, 0.5), ev(1, 1, 1.0 + 0.5 * IDLE_S / MS, 1.1)]
    assert receive_latencies(g, just, per_rank=1) == []
    untimed = [ev(1, 0, 0.0, 1.0), ev(1, 1, 1.5, 1.6)]          # no send event
    assert receive_latencies(g, untimed, per_rank=1) == []


def run(ranks, graph_, events):
    return SimpleNamespace(ranks=ranks, per_rank=1, graph=graph_, events=events)


def test_ranks_outnumbering_cores_take_the_mean_wait_of_their_messages_if_longer():
    g = graph((0, 1), (1, 0))
    a = run(4, g, [ev(1, 0, 0.0, 0.2), ev(0, 1, 0.9, 1.0), ev(1, 1, 1.4, 1.5),
                   ev(1, 2, 1.5, 1.6), ev(0, 2, 2.6, 2.7)])     # waits 0.4 and 1.0 ms
    b = run(4, g, [ev(0, 1, 0.0, 0.1), ev(1, 1, 0.2, 0.3)])      # 0.1 ms
    assert waiting_slice([a, b], 2, 0.05 * MS) == pytest.approx(0.5 * MS)
    assert waiting_slice([a, b], 2, 0.7 * MS) == 0.7 * MS        # the events' is longer
    # where each rank has a core, or no message waited, the task events' slice stays
    assert waiting_slice([a, b], 4, 0.05 * MS) == 0.05 * MS
    quiet = run(4, g, [ev(0, 0, 0.0, 1.0)])
    assert waiting_slice([quiet], 2, 0.05 * MS) == 0.05 * MS
    assert waiting_slice([], 2, 0.05 * MS) == 0.05 * MS
