"""Numbers the runtime reads from TASKRT_* environment variables, with clear errors.

    POLL = env_number("TASKRT_POLL_MAX_S", 1e-3, minimum=0)

A value that is not a number (or is below its minimum) is an error naming the variable, the
value and what it expects, never a bare float() traceback. Values read when a module is
imported use `strict=False` (the default then stands, so that importing never fails); every
executor calls `check_environment()` when it is built, and the apps at start-up, so a bad
value still stops the run with that message.
"""
from __future__ import annotations

import os

from .errors import PlanError

# name -> (default, integer, minimum): every TASKRT_* number the runtime reads.
SETTINGS = {
    "TASKRT_WATCHDOG_S": (0.0, False, 0),          # set: a fixed limit (0: off)
    "TASKRT_WATCHDOG_FLOOR_S": (60.0, False, 0),
    "TASKRT_WATCHDOG_START_S": (600.0, False, 0),
    "TASKRT_POLL_MAX_S": (1e-3, False, 0),
    "TASKRT_POLL_BUSY_S": (2e-4, False, None),
    "TASKRT_SPIN_S": (1e-3, False, 0),
    "TASKRT_BUCKET_BYTES": (25 << 20, True, 0),
    "TASKRT_MIN_TEMPORARY_BYTES": (256 << 10, True, 0),
    "TASKRT_CPU_RETAIN_BYTES": (1 << 30, True, 0),
}


def env_number(name: str, default: float | None = None, *, integer: bool | None = None,
               minimum: float | None = None, strict: bool = True) -> float:
    """The variable's value, or `default` (SETTINGS' when None) when it is unset."""
    known = SETTINGS.get(name, (None, False, None))
    default = known[0] if default is None else default
    integer = known[1] if integer is None else integer
    minimum = known[2] if minimum is None else minimum
    raw = os.environ.get(name)
    if raw is None:
        return int(default) if integer else float(default)
    kind = "an integer" if integer else "a number"
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        if not strict:
            return int(default) if integer else float(default)
        raise PlanError(f"environment variable {name}={raw!r} is not {kind}; set it to "
                        f"{kind} (default {default}) or unset it.") from None
    if minimum is not None and value < minimum:
        if not strict:
            return int(default) if integer else float(default)
        raise PlanError(f"environment variable {name}={raw!r} is below {minimum}; set it "
                        f"to at least {minimum} (default {default}) or unset it.")
    return value


def check_environment() -> None:
    """Raise PlanError naming every TASKRT_* variable set to a value the runtime refuses."""
    problems = []
    for name in SETTINGS:
        try:
            env_number(name)
        except PlanError as e:
            problems.append(str(e))
    if problems:
        raise PlanError(" ".join(problems))
