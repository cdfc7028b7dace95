"""Waiting ranks that sleep: when a message (or an all-reduce's end) reaches a rank that has
nothing to run, the MPI executor sees it only at its next wake-up.

A rank with nothing runnable yields its core for Settings.spin_s, then sleeps 20 us, 40 us,
... doubling up to poll_max_s, polling MPI at each wake-up (taskrt/executor/policies.py
IdleBackOff; spin_s and poll_max_s from choose_idle_schedule, once per job and node: no
yield and 1 ms sleeps when the node's ranks and its other runnable threads outnumber its
cores, else 1 ms of yields and 200 us sleeps; the traces record it, `traced_schedule`).
Each sleep also lasts the OS's timer slack longer (/proc/thread-self/timerslack_ns, 50 us
by default: time.sleep(20e-6) took 75 us here). A message that arrives during a sleep of
length L waits L / 2 on average before its unpack starts. On 4 ranks of 2 cores (1 ms
sleeps) every hop of a chain of messages to an idle rank costs about half a millisecond
that no node's cost holds: the traced ranks of the
Transformer's searched strategy were asleep (neither on a core nor runnable) 30 of a 55 ms
iteration.

`SleepSchedule.delay` is that expected wait for a rank idle for a given time when the
message comes; `wake_delays` reads, from a simulated timeline, when each message reaches
its receiver and how long that receiver's host thread had been idle, and `WakeTimer` holds
the receiver's post phase (recv unpack, all-reduce wait) that much longer in the next
simulation (strategy/calibration.py predict: a few rounds, as cores.py settles its
contentions). One process has no such wait (its one thread runs every node in order).
"""
from __future__ import annotations

import bisect
import math
import statistics
from collections import Counter
from dataclasses import dataclass

from taskrt.taskgraph import ALLREDUCE, COPY
from taskrt.trace import LOAD_EVENT, SCHEDULE

ROUNDS = 2            # simulations to settle the delays (each from the previous timeline)


def timer_slack_s() -> float:
    """How much longer than asked the OS lets a sleep last (Linux: the thread's timer slack,
    50 us by default); 50 us where the OS does not say."""
    for path in ("/proc/thread-self/timerslack_ns", "/proc/self/timerslack_ns"):
        try:
            with open(path) as f:
                return int(f.read().strip()) * 1e-9
        except (OSError, ValueError):
            continue
    return 5e-5


@dataclass(frozen=True)
class SleepSchedule:
    """How an idle rank waits: yields for spin_s (sees a message at once), then sleeps
    first_s, 2 first_s, ... up to max_s, each overshoot_s longer than asked."""
    spin_s: float
    first_s: float
    max_s: float
    overshoot_s: float

    def __post_init__(self):
        if not (self.spin_s >= 0 and self.first_s > 0 and self.max_s >= self.first_s
                and self.overshoot_s >= 0):
            raise ValueError(f"SleepSchedule: need spin_s >= 0, 0 < first_s <= max_s and "
                             f"overshoot_s >= 0, got {self}")

    def delay(self, idle_s: float) -> float:
        """Expected seconds from a message's arrival to the wake-up that sees it, for a rank
        that had been idle `idle_s` when it arrived: half the sleep it arrived in."""
        if idle_s < self.spin_s:
            return 0.0
        t, s = self.spin_s, self.first_s
        while True:
            length = s + self.overshoot_s
            if idle_s < t + length or s >= self.max_s:
                return length / 2
            t += length
            s = min(2 * s, self.max_s)

    def to_dict(self) -> dict:
        return {"spin_s": self.spin_s, "first_s": self.first_s, "max_s": self.max_s,
                "overshoot_s": self.overshoot_s}


def executor_schedule(ranks_here: int, cores: int, others: float,
                      overshoot_s: float | None = None) -> SleepSchedule:
    """The MPI executor's schedule on a node of `cores` cores running `ranks_here` ranks
    beside `others` runnable threads of other processes (taskrt/executor/policies.py)."""
    from taskrt.executor.policies import FIRST_SLEEP_S, default_poll_max_s, default_spin_s
    return SleepSchedule(default_spin_s(ranks_here, cores, others), FIRST_SLEEP_S,
                         default_poll_max_s(ranks_here, cores, others),
                         timer_slack_s() if overshoot_s is None else overshoot_s)


def others_of(runs) -> float:
    """The other processes' runnable threads while the runs ran, as executors before the
    recorded schedule read them (policies.others_runnable: the load average less the ranks):
    the median over the runs of the load average their traces recorded (0 where none did)."""
    seen = []
    for r in runs:
        avg = [a.get("loadavg") for a in _load_records(r)]
        avg = [a for a in avg if isinstance(a, (int, float)) and not isinstance(a, bool)]
        if avg:
            seen.append(max(0.0, statistics.median(avg) - r.ranks))
    return statistics.median(seen) if seen else 0.0


def _load_records(run) -> list[dict]:
    return [e.get("args") or {} for e in run.events
            if e.get("ph") == "M" and e.get("name") == LOAD_EVENT]


def recorded_schedules(runs) -> list[tuple[float, float]] | None:
    """(spin_s, poll_max_s) of every rank of every run, as their traces recorded them
    (taskrt.trace.SCHEDULE, since 2026-12-06); None when a run's trace has none."""
    out = []
    for r in runs:
        recs = [a.get(SCHEDULE) for a in _load_records(r)]
        if not recs or any(not isinstance(x, dict) for x in recs):
            return None
        out += [_schedule_of(x, r.path) for x in recs]
    return out


def _schedule_of(record: dict, path: str) -> tuple[float, float]:
    """(spin_s, poll_max_s) of a trace's schedule record, checked (a ValueError naming the
    trace where they are not numbers with spin_s >= 0 and poll_max_s > 0)."""
    try:
        spin_s, max_s = float(record["spin_s"]), float(record["poll_max_s"])
    except (KeyError, TypeError, ValueError):
        spin_s = max_s = float("nan")
    if not (spin_s >= 0 and max_s > 0 and math.isfinite(spin_s) and math.isfinite(max_s)):
        raise ValueError(f"trace {path}: its '{LOAD_EVENT}' record's '{SCHEDULE}' is "
                         f"{record!r}; it needs numbers spin_s >= 0 and poll_max_s > 0 "
                         "(as the MPI executor writes them): record the run again with "
                         "--trace, or leave the trace out")
    return spin_s, max_s


def traced_schedule(runs, ranks_here: int, cores: int,
                    overshoot_s: float | None = None) -> SleepSchedule:
    """The schedule the calibrating runs' waiting ranks followed: the one their traces
    recorded (the most common over the runs' ranks: the executor decides one per job and
    node), or, for traces from before the record, executor_schedule from their load
    averages (others_of), as those executors decided it."""
    seen = recorded_schedules(runs)
    if not seen:
        return executor_schedule(ranks_here, cores, others_of(runs), overshoot_s)
    from taskrt.executor.policies import FIRST_SLEEP_S
    (spin_s, max_s), _ = Counter(seen).most_common(1)[0]
    return SleepSchedule(spin_s, FIRST_SLEEP_S, max(max_s, FIRST_SLEEP_S),
                         timer_slack_s() if overshoot_s is None else overshoot_s)


def busy_before(intervals) -> tuple[list, list]:
    """(starts, running max of ends) of a thread's intervals sorted by start."""
    spans = sorted(intervals)
    starts = [s for s, _ in spans]
    ends, top = [], float("-inf")
    for _, e in spans:
        top = max(top, e)
        ends.append(top)
    return starts, ends


def _idle_for(busy, at: float) -> float | None:
    """How long a thread (busy: busy_before) had been idle at time `at` (None: busy then:
    it polls when its current node ends, which the simulation holds already)."""
    starts, ends = busy
    i = bisect.bisect_left(starts, at)       # intervals that started before `at`
    if i == 0:
        return at                            # idle since the iteration began
    last = ends[i - 1]
    return None if last >= at else at - last


def wake_delays(graph, result, timer, schedule: SleepSchedule) -> dict:
    """{node id: seconds} the receiving threads of `result`'s messages (copies between
    processes) and multi-process all-reduces sleep past their arrival (the longest of an
    all-reduce's members), from the simulated timeline (its threads' busy intervals)."""
    from .cores import simulated_intervals
    busy = {t: busy_before(spans)
            for t, spans in simulated_intervals(graph, result, timer).items()}
    run = result.run if result.run is not None else result.start
    out = {}
    for node in graph.nodes:
        if node.kind is not COPY and node.kind is not ALLREDUCE:
            continue
        hd, hr, pd, pr = timer.host_phases(node)
        if not pr:
            continue
        if node.kind is COPY and pr == hr:
            continue                         # a copy within one process
        d, _ = timer.timing(node)
        arrival = run[node.id] + d
        idle = [_idle_for(busy[t], arrival) for t in pr if t in busy]
        wait = max((schedule.delay(i) for i in idle if i is not None), default=0.0)
        if wait > 0:
            out[node.id] = wait
    return out
