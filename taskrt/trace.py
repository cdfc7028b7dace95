"""Trace: what ran where and when, from a real run or a simulation, in one format.

Times are seconds from the start of the run. `to_chrome` writes the Chrome/Perfetto
trace-event JSON (one track per device, and per link for transfers).

`LoadMeter` records the load the OS put on the thread while the traced iteration ran (its
CPU seconds, its seconds runnable but waiting for a core, the wall seconds, the load
average); the trace keeps it per rank, as a metadata event "soapflow_load", so that a
calibration from the trace knows how much of each event was the machine's other work
(strategy/calibration.py; docs/simulator.md). The MPI executor adds to it, under SCHEDULE,
how its waiting ranks waited (policies.IdleSchedule.to_dict(): spin_s, poll_max_s and
what they were decided from), which the calibration's wake-up model reads
(strategy/wakeups.py traced_schedule).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

from .errors import PlanError
from .taskgraph import ALLREDUCE, COPY, TASK


@dataclass(frozen=True, slots=True)
class TraceEvent:
    node: int            # TaskGraph node id
    kind: str            # task, copy, reduce, allreduce
    name: str            # short description
    track: str           # "device 3", "link 0->2", "group 0,1,2,3"
    start: float
    end: float
    nbytes: int = 0

    @property
    def duration(self) -> float:
        return self.end - self.start


def node_label(node) -> str:
    """A short name for a TaskGraph node in a timeline."""
    if node.kind is TASK:
        return f"{node.launch.name}{list(node.color)}"
    return f"{node.kind} {node.region.name}{node.rect}"


def node_track(node) -> str:
    """The track a node's event is drawn on in a real run: its device, link or group."""
    if node.kind is COPY:
        return f"link {node.src}->{node.dst}"
    if node.kind is ALLREDUCE:
        return "group " + ",".join(map(str, node.devices))
    return f"device {node.device}"


def traced_run(executor) -> bool:
    """Whether the executor's next run() is traced: its `tracing`, which needs the
    executor built with record_trace (said, not ignored, when it was not)."""
    if executor.tracing and not executor.record_trace:
        raise PlanError("tracing was set on an executor built without record_trace: "
                        "compile with record_trace=True (apps: --trace FILE) to trace a run")
    return executor.tracing


class Stamps:
    """A traced iteration's events as the executor's loop records them: one tuple (node id,
    start, end) per node, in perf_counter seconds, appended and nothing else, so that the
    recording costs the loop ~0.1 us an event; `events()` makes the TraceEvents (label,
    track, times from the iteration's start) once, when the trace is read. Made as
    TraceEvents inside the loop (a frozen dataclass and two f-strings an event) the
    recording cost ~2.5 us an event, 12% of a Transformer --small iteration on 2 ranks,
    which calibrations from traces then charged to every untraced prediction
    (docs/simulator.md)."""

    __slots__ = ("nodes", "t0", "raw", "_events")

    def __init__(self, nodes=(), t0: float = 0.0):
        self.nodes, self.t0, self.raw, self._events = nodes, t0, [], None

    def events(self) -> list[TraceEvent]:
        if self._events is None:
            nodes, t0 = self.nodes, self.t0
            self._events = [TraceEvent(n.id, n.kind, node_label(n), node_track(n),
                                       start - t0, end - t0, getattr(n, "nbytes", 0))
                            for n, start, end in ((nodes[i], s, e) for i, s, e in self.raw)]
        return self._events


def sched_times() -> tuple[float, float] | None:
    """(seconds on a CPU, seconds runnable but waiting for one) of the calling thread so far,
    from Linux's /proc/thread-self/schedstat; None where there is none."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            cpu, wait = f.read().split()[:2]
    except (OSError, ValueError):
        return None
    return int(cpu) / 1e9, int(wait) / 1e9


LOAD_EVENT = "soapflow_load"      # the metadata event of a rank's load in a trace
SCHEDULE = "schedule"             # its key of the rank's idle schedule (MPI executor; 2026-12-06)
# In a trace file's "otherData" run record: {"period_s", "iterations"} of the untraced timed
# iterations of the run before its traced last one (apps/training.py), when it had some.
UNTRACED_PERIOD = "untraced_period"


class LoadMeter:
    """The load the OS put on this thread between `start()` and `stop()` (an iteration):
    stop() returns {"wall_s", "cpu_s" (the thread's CPU time), "wait_s" (runnable, waiting
    for a core; None without /proc/thread-self/schedstat), "loadavg" (the 1-minute load
    average at the end; None where the OS has none)}."""

    def start(self) -> "LoadMeter":
        self._t, self._cpu, self._sched = time.perf_counter(), time.thread_time(), sched_times()
        return self

    def stop(self) -> dict:
        wall, cpu, sched = time.perf_counter() - self._t, time.thread_time() - self._cpu, \
            sched_times()
        wait = None
        if sched is not None and self._sched is not None:
            cpu, wait = sched[0] - self._sched[0], sched[1] - self._sched[1]
        try:
            loadavg = os.getloadavg()[0]
        except OSError:
            loadavg = None
        return {"wall_s": wall, "cpu_s": cpu, "wait_s": wait, "loadavg": loadavg}


def to_chrome(events: list[TraceEvent], process_name: str = "taskrt",
              load: dict | None = None) -> dict:
    """Chrome trace-event JSON (load it in chrome://tracing or ui.perfetto.dev); `load`
    (LoadMeter.stop() of the iteration) becomes the metadata event LOAD_EVENT."""
    tracks = sorted({e.track for e in events})
    tid = {t: i for i, t in enumerate(tracks)}
    out = [{"ph": "M", "pid": 0, "name": "process_name", "args": {"name": process_name}}]
    if load is not None:
        out.append({"ph": "M", "pid": 0, "name": LOAD_EVENT, "args": dict(load)})
    out += [{"ph": "M", "pid": 0, "tid": tid[t], "name": "thread_name", "args": {"name": t}}
            for t in tracks]
    for e in events:
        out.append({"ph": "X", "pid": 0, "tid": tid[e.track], "name": e.name, "cat": e.kind,
                    "ts": e.start * 1e6, "dur": max(e.duration, 0.0) * 1e6,
                    "args": {"node": e.node, "bytes": e.nbytes}})
    return {"traceEvents": out, "displayTimeUnit": "ms"}


def write_chrome(path: str, events: list[TraceEvent], process_name: str = "taskrt") -> None:
    with open(path, "w") as f:
        json.dump(to_chrome(events, process_name), f)


def contention_of(loads) -> float | None:
    """Wall seconds per second of work that the OS imposed on the threads of `loads`
    (LoadMeter.stop() records, one per rank): their (CPU + run-queue wait) / CPU, summed
    over the ranks; 1 on idle cores, 3 when a thread ran a third of the time it could have.
    None when a record lacks the run-queue wait (no schedstat) or no CPU time was spent."""
    loads = list(loads)
    if not loads or any(r.get("wait_s") is None or r.get("cpu_s") is None for r in loads):
        return None
    cpu = sum(float(r["cpu_s"]) for r in loads)
    wait = sum(float(r["wait_s"]) for r in loads)
    return (cpu + wait) / cpu if cpu > 0 else None
