"""The watchdog (taskrt/executor/watchdog.py, its limits policies.WatchdogLimit) in one process,
with a recording stand-in for MPI Abort: derived from the slowest iteration, a floor, a
start-up limit, a fixed override (explicit settings over the environment), off with 0; a
guarded call past its limit reports and aborts. The real thing (a SIGSTOPped rank of an
mpirun job) is tests/test_mpi.py."""
import threading

import pytest

from taskrt.executor.policies import FACTOR
from taskrt.executor.watchdog import Watchdog
from taskrt.settings import Settings


def dog(monkeypatch, settings=None, **env):
    for k in ("TASKRT_WATCHDOG_S", "TASKRT_WATCHDOG_FLOOR_S", "TASKRT_WATCHDOG_START_S"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    aborted = threading.Event()
    return Watchdog(3, aborted.set, Settings.resolve(settings)), aborted


def test_limit_follows_the_slowest_iteration_above_a_floor(monkeypatch):
    w, _ = dog(monkeypatch, TASKRT_WATCHDOG_FLOOR_S="5", TASKRT_WATCHDOG_START_S="77")
    assert w.limit()[0] == 77 and "start-up" in w.limit()[1]
    w.limits.slowest_s = 0.1
    assert w.limit()[0] == 5 and "floor" in w.limit()[1]
    w.limits.slowest_s = 2.0
    assert w.limit()[0] == FACTOR * 2.0 and "slowest iteration" in w.limit()[1]


def test_iterations_are_measured_and_other_calls_are_not(monkeypatch):
    w, _ = dog(monkeypatch)
    with w.watch("a read"):
        pass
    assert w.limits.slowest_s is None
    with w.watch("an iteration", iteration=True):
        pass
    first = w.limits.slowest_s
    assert first is not None and first >= 0
    with w.watch("an iteration", iteration=True):
        pass
    assert w.limits.slowest_s >= first


def test_fixed_limit_and_off(monkeypatch):
    w, _ = dog(monkeypatch, TASKRT_WATCHDOG_S="12")
    w.limits.slowest_s = 100.0
    assert w.limit() == (12.0, "TASKRT_WATCHDOG_S") and w.enabled
    off, _ = dog(monkeypatch, TASKRT_WATCHDOG_S="0")
    explicit, _ = dog(monkeypatch, {"watchdog_s": 0}, TASKRT_WATCHDOG_S="12")
    assert not explicit.enabled
    assert not off.enabled
    with off.watch("an iteration", iteration=True):
        pass
    assert off.limits.slowest_s is None


def test_a_call_past_its_limit_reports_and_aborts(monkeypatch, capfd):
    w, aborted = dog(monkeypatch, TASKRT_WATCHDOG_S="0.01")
    with w.watch("an iteration", lambda: "rank 3 is waiting for:\n  message from rank 1"):
        assert aborted.wait(timeout=30), "the watchdog never fired"
    err = capfd.readouterr().err
    assert "[rank 3] watchdog: an iteration still waits after" in err
    assert "limit 0 s: TASKRT_WATCHDOG_S" in err and "message from rank 1" in err


def test_a_call_within_its_limit_never_aborts(monkeypatch):
    w, aborted = dog(monkeypatch, TASKRT_WATCHDOG_S="1000")
    with w.watch("an iteration", iteration=True):
        pass
    assert not aborted.is_set()


@pytest.mark.parametrize("value", ["-1", "soon"])
def test_bad_settings_are_named(monkeypatch, value):
    from taskrt.errors import PlanError
    monkeypatch.setenv("TASKRT_WATCHDOG_FLOOR_S", value)
    with pytest.raises(PlanError, match="TASKRT_WATCHDOG_FLOOR_S"):
        Watchdog(0, lambda: None)
