"""The MPI executor's watchdog: a job one of whose ranks stops (SIGSTOP, a kernel that never
returns, a dead node whose sockets stay open) ends with a message instead of hanging.

The executor guards the calls that wait for other ranks (`watch`: an iteration's run, a
collective read). One daemon thread per process looks, once a second, at the guarded calls
in progress; a call past its limit prints which rank waited, for how long, and for what (the
executor's report: messages from which ranks, all-reduces among which), then ends the whole
job (`abort`: MPI Abort on the world communicator).

The limit (taskrt/executor/policies.py, WatchdogLimit) comes from measured iterations: FACTOR
times the slowest iteration so far, at least Settings.watchdog_floor_s (TASKRT_WATCHDOG_FLOOR_S,
60 s: a pause of the machine, a slow read); before the first iteration has finished,
watchdog_start_s (TASKRT_WATCHDOG_START_S, 600 s: start-up, first allocations). watchdog_s
(TASKRT_WATCHDOG_S) fixes the limit instead; 0 turns the watchdog off.
"""
from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from typing import Callable

from ..settings import Settings
from .policies import WatchdogLimit

TICK_S = 1.0         # how often the thread looks

_active: dict[int, "_Guard"] = {}
_lock = threading.Lock()
_thread: threading.Thread | None = None


class _Guard:
    def __init__(self, owner: "Watchdog", what: str, describe, limit: float, how: str):
        self.owner, self.what, self.describe = owner, what, describe
        self.limit, self.how = limit, how
        self.since = time.monotonic()
        self.fired = False


def _monitor() -> None:
    while True:
        time.sleep(TICK_S)
        now = time.monotonic()
        with _lock:
            late = [g for g in _active.values() if not g.fired and now - g.since > g.limit]
        for g in late:
            g.fired = True
            g.owner.fire(g, now - g.since)


def _start_monitor() -> None:
    global _thread
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=_monitor, name="taskrt-watchdog", daemon=True)
            _thread.start()


class Watchdog:
    """The limits (policies.WatchdogLimit) and guards of one executor; `abort()` ends the job
    (never returns)."""

    def __init__(self, rank: int, abort: Callable[[], None], settings: Settings | None = None):
        self.rank, self.abort = rank, abort
        self.limits = WatchdogLimit(Settings.resolve(settings))

    @property
    def enabled(self) -> bool:
        return self.limits.enabled

    def limit(self) -> tuple[float, str]:
        return self.limits.limit()

    @contextmanager
    def watch(self, what: str, describe: Callable[[], str] | None = None,
              iteration: bool = False):
        """Guard a call that waits for other ranks; with `iteration`, its duration counts
        among the measured iterations."""
        if not self.enabled:
            yield
            return
        _start_monitor()
        g = _Guard(self, what, describe, *self.limit())
        with _lock:
            _active[id(g)] = g
        try:
            yield
        finally:
            with _lock:
                del _active[id(g)]
            if iteration:
                self.limits.iteration_took(time.monotonic() - g.since)

    def fire(self, g: _Guard, elapsed: float) -> None:
        detail = ""
        if g.describe is not None:
            try:
                detail = "\n" + g.describe()
            except Exception as e:            # the report must not stop the abort
                detail = f"\n(what it waited for is unknown: {type(e).__name__}: {e})"
        print(f"[rank {self.rank}] watchdog: {g.what} still waits after {elapsed:.0f} s "
              f"(limit {g.limit:.0f} s: {g.how}); another rank has probably stopped or died. "
              f"Ending the job.{detail}", file=sys.stderr, flush=True)
        self.abort()
