"""The ranks of a recorded run of several ranks put on one clock.

Each MPIExecutor rank stamps its trace events from its own start (taskrt/executor/mpi.py:
clock() - t0, t0 taken when that rank begins the iteration), and the ranks do not begin it
together: on the collection of 2026-12-04 the ranks of one 2-rank iteration began 0-3 ms
apart (522 ms once, Inception-v3 data parallel), those of a 4-rank one 0.1-10 ms apart
(docs/simulator.md, "Ranks on one clock"). What the calibration reads across ranks (the
ranks working at once, strategy/cores.py sharing; a bucket's wait from its last start to
every member rank's first use, strategy/gradbuckets.py) needs one clock.

What the graph orders across ranks bounds each rank's offset: a copy between ranks is
unpacked on its receiver after its sender began packing and sending it (not after the
sender's event ended: the Isend is posted inside it, and the OS may take the core before
the event's end is stamped), and a node using an all-reduce's result starts after every
member rank began posting it. Each gives off_b - off_a >= c (off: what to add to a rank's
stamps to put them on rank 0's clock); the longest paths over them bound every rank's
offset from rank 0 (Bellman-Ford), and each rank is moved the least they allow: the offset
nearest 0 within its bounds, its stamps kept where nothing contradicts them (data parallel
on 4 ranks exchanges only one bucket at its end, which leaves 10-20 ms open).
Traces recorded since 2026-12-05 carry each rank's origin on its host's monotonic clock
and the host (the LOAD_EVENT record): ranks of one host are then put on one clock exactly
(recorded_offsets), and the orderings serve traces without them or of several hosts.
"""
from __future__ import annotations

import math

from taskrt.taskgraph import ALLREDUCE, COPY
from taskrt.trace import LOAD_EVENT


def _node_events(events: list) -> dict:
    """{node id: {rank: earliest start stamp (us) of its events there}}."""
    out: dict = {}
    for e in events:
        if e.get("ph") != "X" or "node" not in (e.get("args") or {}):
            continue
        per = out.setdefault(int(e["args"]["node"]), {})
        r = e.get("pid", 0)
        per[r] = min(per.get(r, math.inf), e["ts"])
    return out


def ordering_bounds(graph, events: list) -> dict:
    """{(a, b): c}: off_b - off_a >= c (us), the tightest bound each pair of ranks' events
    give (module doc)."""
    starts = _node_events(events)
    devices = graph.machine.devices
    bounds: dict = {}

    def bound(a, b, c):
        if a != b and c > bounds.get((a, b), -math.inf):
            bounds[(a, b)] = c
    for i, per in starts.items():
        node = graph.nodes[i]
        if node.kind is COPY:
            a, b = devices[node.src].rank, devices[node.dst].rank
            if a in per and b in per:
                bound(a, b, per[a] - per[b])
        elif node.kind is ALLREDUCE:
            for j in graph.succs[i]:
                for b, used in starts.get(j, {}).items():
                    for a, posted in per.items():
                        bound(a, b, posted - used)
    return bounds


def _longest(ranks, bounds, source) -> dict:
    dist = dict.fromkeys(ranks, -math.inf)
    dist[source] = 0.0
    for _ in range(len(ranks)):
        changed = False
        for (a, b), c in bounds.items():
            if dist[a] + c > dist[b]:
                dist[b] = dist[a] + c
                changed = True
        if not changed:
            break
    return dist


def clock_offsets(graph, events: list) -> dict:
    """{rank: us to add to its stamps to put them on the lowest rank's clock}: per rank the
    offset nearest 0 within the bounds the graph's cross-rank orderings give (the middle of
    them where they contradict each other, which valid stamps cannot)."""
    ranks = sorted({e.get("pid", 0) for e in events
                    if e.get("ph") == "X" and "node" in (e.get("args") or {})})
    if len(ranks) < 2:
        return dict.fromkeys(ranks, 0.0)
    bounds = ordering_bounds(graph, events)
    ranks = sorted(set(ranks) | {r for pair in bounds for r in pair})
    first = ranks[0]
    low = _longest(ranks, bounds, first)                  # off_r >= low[r]
    offsets = {first: 0.0}
    for r in ranks[1:]:
        back = _longest(ranks, bounds, r)[first]         # off_first - off_r >= back
        high = -back                                     # off_r <= high
        offsets[r] = (low[r] + high) / 2 if low[r] > high else min(max(0.0, low[r]), high)
    for _ in range(len(ranks)):      # each rank within its bounds from the others' choices
        for r in ranks[1:]:
            lo = max((offsets[a] + c for (a, b), c in bounds.items() if b == r),
                     default=-math.inf)
            hi = min((offsets[b] - c for (a, b), c in bounds.items() if a == r),
                     default=math.inf)
            if lo <= hi:
                offsets[r] = min(max(offsets[r], lo), hi)
    return offsets


def recorded_offsets(events: list) -> dict | None:
    """{rank: us to add to its stamps to put them on the lowest rank's clock} from the
    stamps' origins the ranks recorded (their LOAD_EVENT's clock_origin_s on the host's
    monotonic clock, and host: taskrt/executor/mpi.py), exact for ranks on one host; None
    when a rank with events has no such record or the ranks ran on several hosts (their
    clocks are not one)."""
    origins = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == LOAD_EVENT:
            a = e.get("args") or {}
            t, host = a.get("clock_origin_s"), a.get("host")
            if isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) \
                    and isinstance(host, str):
                origins[e.get("pid", 0)] = (host, float(t))
    ranks = {e.get("pid", 0) for e in events
             if e.get("ph") == "X" and "node" in (e.get("args") or {})}
    if not ranks or not ranks <= set(origins) or len({origins[r][0] for r in ranks}) != 1:
        return None
    first = origins[min(ranks)][1]
    return {r: (origins[r][1] - first) * 1e6 for r in sorted(ranks)}


def on_one_clock(graph, events: list) -> list:
    """events with every rank's X events moved onto the lowest rank's clock (a new list;
    events of one rank come back unchanged): by the origins the ranks recorded where they
    ran on one host (recorded_offsets), else by the graph's orderings (clock_offsets)."""
    offsets = recorded_offsets(events)
    if offsets is None:
        offsets = clock_offsets(graph, events)
    if not any(offsets.values()):
        return events
    return [dict(e, ts=e["ts"] + offsets.get(e.get("pid", 0), 0.0))
            if e.get("ph") == "X" and "ts" in e else e for e in events]
