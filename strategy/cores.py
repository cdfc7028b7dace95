"""Ranks sharing cores: how much the OS slows each rank's thread when the job's ranks and the
machine's other processes are more than its cores.

The OS shares a machine's C cores among the runnable threads: with n of them each runs at
C / n of a core, so a thread's wall seconds per second of work (its contention, what
/proc/thread-self/schedstat counts as (CPU + run-queue wait) / CPU) is max(1, n / C). On
several ranks, n is the job's ranks that have work at that moment plus the machine's other
runnable threads (the background, b): a rank that works while the others wait for its
message runs faster than one of four ranks of data parallelism that all compute at once.
A rank that waits is not runnable when it sleeps (the MPI executor's ranks sleep at once
when they and the machine's other runnable threads outnumber the cores:
taskrt/executor/policies.py default_spin_s), so

    contention of rank r = max(1, (k_r + b) / C)

with k_r the mean number of the job's ranks working while r works (itself included).
`background` fits b to recorded runs (their per-rank CPU and run-queue wait, their events'
overlap, the ranks' stamps on one clock: strategy/rankclocks.py, calibration.load_runs);
`sharing` also fits w, the share of its waits a waiting rank takes a core (its wake-ups),
from the CPU the ranks consumed beyond their events, with which a working rank's
contention is max(1, (k + w (R - k) + b) / C) on R ranks;
`per_thread_contention` finds the k_r of a graph by simulating it at the contention they
imply, a few times (strategy/calibration.py predict). What this does not
model: which core a thread runs on, and when in a wait a waiting rank wakes (sleeps of
20 us - 1 ms: strategy/wakeups.py times the messages' delays, not their CPU).
"""
from __future__ import annotations

import bisect
import os
import statistics

from taskrt.trace import LOAD_EVENT

ROUNDS = 3            # simulations of a graph to settle its ranks' overlap (per_thread_contention)


def machine_cores() -> int:
    """The cores this process may use (the machine the calibrating runs ran on)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
        else (os.cpu_count() or 1)


def overlap(intervals: dict) -> dict:
    """{thread: (busy seconds, mean number of threads busy while it is busy, itself
    included)} of {thread: [(start, end), ...]}; a thread's own overlapping intervals
    count once."""
    edges = []
    for t, spans in intervals.items():
        for s, e in spans:
            if e > s:
                edges.append((s, 1, t))
                edges.append((e, -1, t))
    edges.sort(key=lambda x: (x[0], x[1]))
    depth = dict.fromkeys(intervals, 0)
    busy = dict.fromkeys(intervals, 0.0)
    weighted = dict.fromkeys(intervals, 0.0)
    active: set = set()
    last = None
    for time, step, t in edges:
        if last is not None and time > last and active:
            dt, n = time - last, len(active)
            for a in active:
                busy[a] += dt
                weighted[a] += dt * n
        last = time
        depth[t] += step
        if depth[t] > 0:
            active.add(t)
        else:
            active.discard(t)
    return {t: (busy[t], weighted[t] / busy[t] if busy[t] > 0 else 1.0) for t in intervals}


def recorded_contention(events: list) -> dict:
    """{rank: (CPU + run-queue wait) / CPU} from a trace's LOAD_EVENT records (ranks whose
    record lacks either are left out)."""
    out = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == LOAD_EVENT:
            a = e.get("args") or {}
            cpu, wait = a.get("cpu_s"), a.get("wait_s")
            if isinstance(cpu, (int, float)) and isinstance(wait, (int, float)) and cpu > 0:
                out[e.get("pid", 0)] = (cpu + wait) / cpu
    return out


def recorded_intervals(events: list) -> dict:
    """{rank: [(start s, end s)]} of a trace's node events."""
    out: dict = {}
    for e in events:
        if e.get("ph") == "X" and "node" in (e.get("args") or {}):
            s = e["ts"] / 1e6
            out.setdefault(e.get("pid", 0), []).append((s, s + e["dur"] / 1e6))
    return out


# A run whose contention is at most this is at the floor of max(1, (k + b) / C): the OS
# counted (next to) no run-queue wait (20-50 us over a 300 ms iteration on a quiet machine).
FLOOR = 1.01


def waking_cpu(events: list, busy: dict) -> tuple[float, float] | None:
    """(CPU seconds, wall seconds) of a recorded run's ranks beyond their node events (busy:
    {rank: busy seconds}, overlap()): per rank, the time it was runnable beyond its events
    (CPU + run-queue wait - busy, the events taken as runnable throughout), of which the
    CPU part (CPU / (CPU + wait)), and its wall time beyond its events (wall_s - busy),
    summed over the ranks. None when a rank's load record lacks cpu_s, wait_s or wall_s."""
    cpu_s = wall_s = 0.0
    for e in events:
        if e.get("ph") == "M" and e.get("name") == LOAD_EVENT:
            a = e.get("args") or {}
            cpu, wait, wall = a.get("cpu_s"), a.get("wait_s"), a.get("wall_s")
            if not all(isinstance(v, (int, float)) for v in (cpu, wait, wall)):
                return None
            b = busy.get(e.get("pid", 0), 0.0)
            if cpu + wait > 0:
                cpu_s += cpu * max(0.0, cpu + wait - b) / (cpu + wait)
            wall_s += max(0.0, wall - b)
    return cpu_s, wall_s


def sharing(runs, cores: int) -> tuple[float, float] | None:
    """(b, w) fitted to recorded runs of several ranks (strategy.calibration.RecordedRun):
    the share w of its waits a waiting rank takes a core (its wake-ups: sleeps of 20 us
    doubling to 1 ms, each a pass over MPI), and the machine's other runnable threads b.
    w is the CPU the runs' ranks consumed beyond their events over their wall time beyond
    them (waking_cpu; the median over the runs with such time): what the waiting ranks take
    from the working ones, not their wake-ups' queueing. b: per run, from its ranks'
    recorded loads and its events' overlap, both weighted by the ranks' busy time, C x its
    contention - k (the ranks working at once) = b + w x (R - k), R its ranks; b the median
    over the runs of C c - k - w (R - k), at least 0. A run at the floor (contention <=
    FLOOR: no thread waited for a core) determines nothing, only that b + w (R - k) <= C -
    k: such runs bound b, and with no run above the floor (b, w) = (0, 0), what the runs
    measured (nobody waited). None when a run lacks a rank's load record.

    Both were needed on the collection of 2026-12-03 13:56 (docs/simulator.md): on 4 ranks
    of 2 cores the OS counted a contention of 1.79-1.97 for every strategy, those whose
    ranks take turns (operation parallel, k about 1) as much as those whose ranks compute
    at once (data parallel), and with w = 0 the first were predicted 33-44% too fast, the
    second 25-51% too slow; on 2 ranks (contention 1.0000 in every run) taking C - k as b
    gave a held-out data parallel (k near 2) a contention of 1.2-1.35 no run had. w was
    the slope of the line through the runs' (R - k, C c - k) until 2026-12-06; on 4 ranks
    of 2 cores those counts (1.66-1.96 for every strategy: a waking rank's queueing counts
    in its own contention) do not determine it: fitted 0.58-0.69, the held-out strategies
    whose ranks take turns were priced up to 70% slow (RNNLM's searched). The ranks' CPU
    beyond their events gave w 0.21-0.24 on both folds of the ninth collection."""
    xs, ys, bounds, shares = [], [], [], []
    for r in runs:
        c = recorded_contention(r.events)
        if len(c) != r.ranks:
            return None
        ov = overlap(recorded_intervals(r.events))
        ov = {k: ov.get(k, (0.0, 1.0)) for k in c}      # a rank may run no node at all
        woke = waking_cpu(r.events, {k: ov[k][0] for k in c})
        if woke is None:
            return None
        if woke[1] > 0:
            shares.append(woke[0] / woke[1])
        busy = sum(ov[k][0] for k in c)
        if busy <= 0:
            continue
        c_run = sum(ov[k][0] * c[k] for k in c) / busy
        k_run = sum(ov[k][0] * ov[k][1] for k in c) / busy
        point = (max(0.0, r.ranks - k_run), cores * c_run - k_run)
        if c_run <= FLOOR:
            bounds.append(point)
        else:
            xs.append(point[0])
            ys.append(point[1])
    if not xs and not bounds:
        return None
    if not xs:
        return 0.0, 0.0
    w = min(1.0, statistics.median(shares)) if shares else 0.0
    b = statistics.median(y - w * x for x, y in zip(xs, ys))
    b = max(0.0, min([b, *(y - w * x for x, y in bounds)]))
    return b, w


def background(runs, cores: int) -> float | None:
    """sharing()'s b alone (other runnable threads beside the ranks' work and wake-ups)."""
    fit = sharing(runs, cores)
    return None if fit is None else fit[0]


def contention_of_overlap(k: float, b: float, cores: int, waiting: float = 0.0,
                          ranks: int = 0) -> float:
    """A thread's contention when k of the job's threads (itself included) work, the job's
    other `ranks` - k wait (on a core a share `waiting` of it) and b others share `cores`
    cores."""
    return max(1.0, (k + waiting * max(0.0, ranks - k) + b) / cores)


def simulated_intervals(graph, result, timer) -> dict:
    """{host thread: [(start, end)]} of a simulated timeline: the host phases and the work
    on a thread that is also its device (a CPU rank runs its tasks)."""
    threads = {timer.host(d) for d in range(timer.model.num_devices)}
    out: dict = {t: [] for t in threads}
    run = result.run if result.run is not None else result.start
    for node in graph.nodes:
        i = node.id
        d, rs = timer.timing(node)
        hd, hr, pd, pr = timer.host_phases(node)
        for r in hr:
            if hd > 0:
                out[r].append((result.start[i], result.start[i] + hd))
        for r in rs:
            if r in out and d > 0:
                out[r].append((run[i], run[i] + d))
        for r in pr:
            if pd > 0:
                out[r].append((result.end[i] - pd, result.end[i]))
    return out


def per_thread_contention(graph, model, costs, b: float, cores: int,
                          rounds: int = ROUNDS, waiting: float = 0.0) -> dict:
    """{host thread: contention} of graph's ranks sharing `cores` cores with b other
    runnable threads: simulated at the contention their overlap implies, `rounds` times
    (starting from every rank working at once)."""
    from .preemption import PreemptedTimer
    from .simulator import simulate
    probe = PreemptedTimer(model, costs, 1.0, 0.0)
    threads = sorted(probe.threads, key=str)
    n = len(threads)
    c = dict.fromkeys(threads, contention_of_overlap(n, b, cores))
    for _ in range(rounds):
        timer = PreemptedTimer(model, costs, c, 0.0)
        result = simulate(graph, model, costs, timer)
        ov = overlap(simulated_intervals(graph, result, timer))
        c = {t: contention_of_overlap(ov[t][1], b, cores, waiting, n) if ov[t][0] > 0 else c[t]
             for t in threads}
    return c


# A rank is idle when a message reaches it if it had run nothing for this long before its
# receive began (shorter gaps are the executor's own steps between two nodes).
IDLE_S = 20e-6


def receive_latencies(graph, events: list, per_rank: int) -> list:
    """Seconds each message between ranks waited for a receiver that had nothing to run:
    the receive event's start less the later of the send event's end and the receiver's
    last event's end, for the messages whose receiver was idle (at least IDLE_S) before its
    receive. `events`: a recorded run's, on one clock (strategy/rankclocks.py)."""
    from taskrt.taskgraph import COPY
    from .wakeups import busy_before
    ends_of: dict = {}                  # node id -> {rank: (start, end)} of its events
    spans: dict = {}
    for e in events:
        if e.get("ph") == "X" and "node" in (e.get("args") or {}):
            s, rank = e["ts"] / 1e6, e.get("pid", 0)
            span = (s, s + e["dur"] / 1e6)
            ends_of.setdefault(e["args"]["node"], {}).setdefault(rank, []).append(span)
            spans.setdefault(rank, []).append(span)
    busy = {rank: busy_before(sp) for rank, sp in spans.items()}    # (starts, max of ends)
    out = []
    for node in graph.nodes:
        if node.kind is not COPY or node.src // per_rank == node.dst // per_rank:
            continue
        ev = ends_of.get(node.id, {})
        send, recv = ev.get(node.src // per_rank, []), ev.get(node.dst // per_rank, [])
        if len(send) != 1 or len(recv) != 1:
            continue                    # untimed, or not one send and one receive
        sent, got = send[0][1], recv[0][0]
        starts, ends = busy[node.dst // per_rank]
        i = bisect.bisect_left(starts, got)
        last = ends[i - 1] if i > 0 else float("-inf")
        if got - last >= IDLE_S and sent < got:
            out.append(got - max(last, sent))
    return out


def waiting_slice(runs, cores: int, slice_s: float) -> float:
    """The preemption slice a prediction on several ranks draws (strategy/preemption.py):
    where the runs' ranks outnumber the cores, the longer of `slice_s` (the slices the task
    events felt, insitu.slice_length) and the mean wait of a message for its idle receiver
    in the runs (receive_latencies: how long a rank that sleeps or waits for a core stays
    off it); else, or with no such message, `slice_s`.

    The slices' length sets how much ranks that exchange messages at every step hold each
    other up (each waits for the others' stalls; data parallel's ranks meet only at their
    all-reduces). On 4 ranks of 2 cores the task events' slice was 95-674 us by fold and
    collection, the messages' mean wait 400-470 us in every fold of two collections, and the
    strategies in lock step (parameter parallel: 50-110 messages a rank an iteration, 300-400
    us a wait) were predicted 14-35% fast where the events' slice was the shorter
    (2026-12-06, docs/simulator.md)."""
    if not runs or runs[0].ranks <= cores:
        return slice_s
    waits = [x for r in runs for x in receive_latencies(r.graph, r.events, r.per_rank)]
    return max(slice_s, statistics.fmean(waits)) if waits else slice_s
