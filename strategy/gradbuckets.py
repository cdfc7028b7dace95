"""The MPI executor's gradient buckets in a calibrated simulation of several ranks, and what a
bucket's collective takes on ranks that poll MPI between sleeps.

The MPIExecutor fuses the all-reduces of one set of ranks into buckets (taskrt/executor/
buckets.py, at most Settings.bucket_bytes each) and starts a bucket's one MPI collective
(Iallreduce) when its last member is ready; the collective advances only when its ranks poll
MPI (Testsome), and a rank with nothing to run polls between sleeps (wakeups.py). The
simulator times all-reduces node by node, each on the links as soon as its own gradient is
summed. On the collection of 2026-12-04 (4 ranks of 2 cores, ranks sleeping 1 ms between
polls) data and attribute parallel form one bucket of all their gradients (134 KB - 3.6 MB),
and the last rank's first update started 8-21 ms after the last rank had started the
bucket's last member (on 2 ranks, whose ranks spin, 0.2-2.8 ms), where the machine model's
all-reduce takes 0.1-0.5 ms.

`bucketed` gives a graph whose bucket members wait for every member's inputs (what the
executor does); `collective_waits` measures, per bucket of a recorded run, the time from
its members' last start event (any rank) to the first event using a member on the last
member rank to run one, beyond the model's link time for the bucket; per number of ranks
taking part, a line in log2(1 + KiB) of the bucket's bytes through them (`size_x`: the
wait grew from 0-3 ms at 0.3 KB to 11-21 ms at 1-4 MB) is `Fit.collective_s`
(strategy/calibration.py), and `bucket_collectives` gives each bucket a resource of its
own in a prediction, which its first member holds that much longer (a wait, not work: no
slices, no thread held, and the links stay free for other messages; the members after it
queue behind it there).
"""
from __future__ import annotations

import math
import statistics

from taskrt.executor.buckets import allreduce_buckets
from taskrt.executor.collectives import rank_group, sum_dtype
from taskrt.settings import Settings
from taskrt.taskgraph import ALLREDUCE


def buckets_of(graph, max_bytes: int | None = None) -> list[tuple[int, ...]]:
    """The buckets of graph's all-reduces over several ranks, as the MPI executor forms them
    (member ids in order; at most `max_bytes`, default Settings' bucket_bytes as this
    process's environment sets it, as the executor would), in order of their first member."""
    machine = graph.machine

    def group_of(n):
        g = rank_group(n, machine)
        return g if len(g) > 1 else None
    got = allreduce_buckets(graph, group_of, lambda n: sum_dtype(n.region),
                            Settings.resolve().bucket_bytes if max_bytes is None else max_bytes)
    return sorted(set(got.values()))


def bucketed(graph, buckets) -> object:
    """A copy of graph in which each bucket's members wait for every member's inputs (the
    collective starts when the last is ready). Nodes, ids and everything else are shared;
    the copy's edges are no longer in id order, so it needs the ready-order schedule."""
    if not any(len(b) > 1 for b in buckets):
        return graph
    preds = [list(p) for p in graph.preds]
    for b in buckets:
        inputs = sorted({p for m in b for p in graph.preds[m]})
        for m in b:
            preds[m] = inputs
    return graph.with_preds(preds)


def group_size(graph, bucket) -> int:
    """The ranks taking part in a bucket's collective."""
    return len(rank_group(graph.nodes[bucket[0]], graph.machine))


def rounds(p: int) -> int:
    """The rounds of messages a collective of p ranks takes at least: ceil(log2 p) (each
    advances only when both partners poll)."""
    return max(1, math.ceil(math.log2(p)))


def size_x(nbytes: float) -> float:
    """The size coordinate a collective's wait is a line in: log2(1 + KiB). The rounds of
    messages and handshakes grow with the size (eager messages, then rendezvous, then
    pipelined pieces); on the collection of 2026-12-04 a 4-rank bucket waited 0-3 ms at
    0.1-0.3 KB, 5-8 ms at 33-37 KB, 9-16 ms at 100-170 KB and 11-21 ms at 1.1-3.6 MB."""
    return math.log2(1.0 + nbytes / 1024.0)


def collective_waits(run, link_time) -> list[tuple[int, int, float]]:
    """(ranks, bytes, seconds) per multi-rank bucket of a recorded run (strategy.calibration.
    RecordedRun): from the end of the last start event of its members (on any rank) to when
    the last member rank started an event using a member (the iteration waits for every
    member), less `link_time(member nodes)` (the model's time on the links). Buckets whose
    members or users have no event are left out. It compares stamps of different ranks:
    the run's events must be on one clock (calibration.load_runs: strategy/rankclocks.py)."""
    g = run.graph
    started: dict = {}
    first_start: dict = {}          # (node, rank) -> its event's start
    for e in run.events:
        if e.get("ph") != "X" or "node" not in (e.get("args") or {}):
            continue
        i = int(e["args"]["node"])
        s, end = e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6
        if g.nodes[i].kind is ALLREDUCE:
            started[i] = max(started.get(i, end), end)
        key = (i, e.get("pid", 0))
        first_start[key] = min(first_start.get(key, s), s)
    out = []
    for b in buckets_of(g):
        if any(m not in started for m in b):
            continue
        users = {s for m in b for s in g.succs[m]} - set(b)
        seen: dict = {}                 # rank -> its first event using a member
        for (u, rank), s in first_start.items():
            if u in users:
                seen[rank] = min(seen.get(rank, s), s)
        if not seen:
            continue
        nodes = [g.nodes[m] for m in b]
        wait = max(seen.values()) - max(started[m] for m in b) - link_time(nodes)
        out.append((group_size(g, b), sum(n.nbytes for n in nodes), wait))
    return out


def collective_wait(runs, link_time) -> dict | None:
    """{ranks: (a, f)}: a bucket's collective over that many ranks waits a + f x size_x(its
    bytes) seconds beyond its links, a Theil-Sen line (a, f >= 0) through the runs' buckets
    of that many ranks (collective_waits); None when no run has a bucket."""
    from .insitu import _line
    by_size: dict = {}
    for r in runs:
        for p, nbytes, w in collective_waits(r, link_time):
            by_size.setdefault(p, []).append((size_x(nbytes), w))
    if not by_size:
        return None
    return {p: _line([x for x, _ in rows], [w for _, w in rows])
            for p, rows in sorted(by_size.items())}


def wait_of(waits: dict, p: int, nbytes: float) -> float:
    """The wait of a collective of p ranks and nbytes: the line measured for p, else that of
    the nearest size measured scaled by the rounds (`rounds`)."""
    q = p if p in waits else min(waits, key=lambda q: (abs(q - p), q))
    a, f = waits[q]
    return max(0.0, a + f * size_x(nbytes)) * rounds(p) / rounds(q)


def bucket_collectives(graph, buckets, waits: dict) -> dict:
    """{node id: (resource, seconds)} for PreemptedTimer's `collectives`: a bucket's members
    hold one resource of their own (the bucket's collective) instead of links, so that
    other messages go on meanwhile; its first member holds it its collective's wait longer
    and the members after it queue behind it, so the whole bucket completes that much
    later; no thread is held."""
    out = {}
    for b in buckets:
        w = wait_of(waits, group_size(graph, b), sum(graph.nodes[m].nbytes for m in b))
        key = ("collective", b[0])
        for m in b:
            out[m] = (key, w if m == b[0] else 0.0)
    return out
