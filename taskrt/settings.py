"""The runtime's tunable numbers: one Settings object, resolved once, passed down.

    settings = Settings.resolve()                      # environment over defaults
    settings = Settings.resolve({"spin_s": 0})         # explicit values over both
    MPIExecutor(graph, settings=settings)              # executors, liveness, the watchdog

Where a value comes from, strongest first: an explicit value (a Settings object passed as is,
or a dict of field names), then the TASKRT_* environment variable, then the default in
FIELDS (the only place defaults live). Nothing reads the environment at import time: a module
that needs a number takes it from the Settings its caller resolved, and code handed no
Settings resolves one when it is called (so a variable set after import counts, and the
executor and the simulator see the same value).

A value that is not a number (or is below its minimum) is an error naming the variable, the
value and what it expects, never a bare float() traceback; `check_environment()` (the apps
at start-up) reports every bad variable at once.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Mapping

from .errors import PlanError

# field -> (environment variable, default, integer, minimum, what it sets). None as a default
# means "derived where it is used" (said in the last column).
FIELDS = {
    "watchdog_s": ("TASKRT_WATCHDOG_S", None, False, 0,
                   "a fixed watchdog limit (0: off; unset: derived from iterations)"),
    "watchdog_floor_s": ("TASKRT_WATCHDOG_FLOOR_S", 60.0, False, 0,
                         "the least derived watchdog limit"),
    "watchdog_start_s": ("TASKRT_WATCHDOG_START_S", 600.0, False, 0,
                         "the watchdog limit before an iteration has finished"),
    "poll_max_s": ("TASKRT_POLL_MAX_S", None, False, 0,
                   "longest idle sleep between MPI polls (unset: 200 us when each rank of "
                   "the node has a core, else 1 ms; taskrt/executor/policies.py)"),
    "poll_busy_s": ("TASKRT_POLL_BUSY_S", 2e-4, False, None,
                    "least time between MPI polls while tasks run (negative: only when idle)"),
    "spin_s": ("TASKRT_SPIN_S", None, False, 0,
               "how long an idle rank yields the core before it sleeps (unset: 1 ms when "
               "each rank of the node has a core, else 0; taskrt/executor/policies.py)"),
    "bucket_bytes": ("TASKRT_BUCKET_BYTES", 25 << 20, True, 0,
                     "gradient bucket size for all-reduces (0: one collective per node)"),
    "min_temporary_bytes": ("TASKRT_MIN_TEMPORARY_BYTES", 256 << 10, True, 0,
                            "buffers smaller than this are never freed (taskrt.liveness)"),
    "cpu_retain_bytes": ("TASKRT_CPU_RETAIN_BYTES", 1 << 30, True, 0,
                         "free CPU memory malloc keeps in the process (0: malloc as is)"),
    "plan_memo_nodes": ("TASKRT_PLAN_MEMO_NODES", 300_000, True, 0,
                        "nodes of region plans a planner remembers for a search that comes "
                        "back to them (0: none; taskrt/regionmemo.py)"),
    "cuda_graphs": ("TASKRT_CUDA_GRAPHS", 0, True, 0,
                    "LocalExecutor: 1 = capture each CUDA device's work as CUDA graphs after "
                    "a warm-up iteration and replay them (taskrt/executor/capture.py); 2 = "
                    "the same on any device with the checking replay (tests, CPU); 0 = off. "
                    "Off by default until a GPU session has verified it (docs/gpu.md)"),
}


@dataclass(frozen=True)
class Settings:
    watchdog_s: float | None = FIELDS["watchdog_s"][1]
    watchdog_floor_s: float = FIELDS["watchdog_floor_s"][1]
    watchdog_start_s: float = FIELDS["watchdog_start_s"][1]
    poll_max_s: float | None = FIELDS["poll_max_s"][1]
    poll_busy_s: float = FIELDS["poll_busy_s"][1]
    spin_s: float | None = FIELDS["spin_s"][1]
    bucket_bytes: int = FIELDS["bucket_bytes"][1]
    min_temporary_bytes: int = FIELDS["min_temporary_bytes"][1]
    cpu_retain_bytes: int = FIELDS["cpu_retain_bytes"][1]
    plan_memo_nodes: int = FIELDS["plan_memo_nodes"][1]
    cuda_graphs: int = FIELDS["cuda_graphs"][1]

    @classmethod
    def resolve(cls, explicit: "Settings | Mapping | None" = None,
                environ: Mapping[str, str] | None = None) -> "Settings":
        """Explicit values, then the environment (`environ`, os.environ when None), then
        FIELDS' defaults. A Settings object is returned as is: it was resolved already."""
        if isinstance(explicit, Settings):
            return explicit
        explicit = dict(explicit or {})
        unknown = sorted(set(explicit) - set(FIELDS))
        if unknown:
            raise PlanError(f"settings: unknown names {unknown}; known: {sorted(FIELDS)}.")
        env = os.environ if environ is None else environ
        values = {}
        for name in FIELDS:
            values[name] = explicit[name] if name in explicit else _from_environment(name, env)
        return cls(**values)


def _from_environment(name: str, env: Mapping[str, str]):
    var, default, integer, minimum, _ = FIELDS[name]
    raw = env.get(var)
    if raw is None:
        return default
    kind = "an integer" if integer else "a number"
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        raise PlanError(f"environment variable {var}={raw!r} is not {kind}; set it to "
                        f"{kind} (default {default}) or unset it.") from None
    if minimum is not None and value < minimum:
        raise PlanError(f"environment variable {var}={raw!r} is below {minimum}; set it "
                        f"to at least {minimum} (default {default}) or unset it.")
    return value


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Raise PlanError naming every TASKRT_* variable set to a value the runtime refuses."""
    env = os.environ if environ is None else environ
    problems = []
    for name in FIELDS:
        try:
            _from_environment(name, env)
        except PlanError as e:
            problems.append(str(e))
    if problems:
        raise PlanError(" ".join(problems))


assert [f.name for f in fields(Settings)] == list(FIELDS), "Settings and FIELDS disagree"
