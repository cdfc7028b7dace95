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
overlap); `per_thread_contention` finds the k_r of a graph by simulating it at the
contention they imply, a few times (strategy/calibration.py predict). What this does not
model: which core a thread runs on, and a waiting rank's wake-ups (sleeps of 20 us - 1 ms).
"""
from __future__ import annotations

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


def background(runs, cores: int) -> float | None:
    """The machine's other runnable threads, b, fitted to recorded runs of several ranks
    (strategy.calibration.RecordedRun): per run, b = C x its contention - the overlap of
    its ranks, both weighted by the ranks' busy time; the median over the runs (at least
    0). None when a run lacks a rank's load record."""
    per_run = []
    for r in runs:
        c = recorded_contention(r.events)
        if len(c) != r.ranks:
            return None
        ov = overlap(recorded_intervals(r.events))
        ov = {k: ov.get(k, (0.0, 1.0)) for k in c}      # a rank may run no node at all
        busy = sum(ov[k][0] for k in c)
        if busy <= 0:
            continue
        c_run = sum(ov[k][0] * c[k] for k in c) / busy
        k_run = sum(ov[k][0] * ov[k][1] for k in c) / busy
        per_run.append(cores * c_run - k_run)
    return max(0.0, statistics.median(per_run)) if per_run else None


def contention_of_overlap(k: float, b: float, cores: int) -> float:
    """A thread's contention when k of the job's threads (itself included) and b others
    share `cores` cores."""
    return max(1.0, (k + b) / cores)


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
                          rounds: int = ROUNDS) -> dict:
    """{host thread: contention} of graph's ranks sharing `cores` cores with b other
    runnable threads: simulated at the contention their overlap implies, `rounds` times
    (starting from every rank working at once)."""
    from .preemption import PreemptedTimer
    from .simulator import simulate
    probe = PreemptedTimer(model, costs, 1.0, 0.0)
    threads = sorted(probe.threads, key=str)
    c = dict.fromkeys(threads, contention_of_overlap(len(threads), b, cores))
    for _ in range(rounds):
        timer = PreemptedTimer(model, costs, c, 0.0)
        result = simulate(graph, model, costs, timer)
        ov = overlap(simulated_intervals(graph, result, timer))
        c = {t: contention_of_overlap(ov[t][1], b, cores) if ov[t][0] > 0 else c[t]
             for t in threads}
    return c
