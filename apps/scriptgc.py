"""Python's cyclic garbage collector around an app script: its start-up imports
(`imports_paused`) and its exit (`exit_frozen`). This module imports nothing but the
standard library: it runs before torch is imported (taskrt's gcpause cannot: its package
imports the planner, and with it torch).

Start: importing torch and this project makes a few hundred thousand objects that live as
long as the process (modules, functions, torch's operator registrations), and they set off
three full collections, each walking everything imported so far (~0.17 s of CPU before a
`--simulate` of GPT-3 2.7B on 128 GPUs does anything). As taskrt.gcpause.gc_paused
(long_lived=True) does for a prediction, the collector is off while the imports run and
what they made moves to the oldest generation at the end.

Exit: the interpreter's shutdown collects every generation, walking every object still
alive, torch's and the prediction's (~0.6 s of CPU for torch alone here, ~1 s after that
`--simulate`), all of it about to go with the process. `exit_frozen` moves every live
object to the permanent generation (gc.freeze) first, which those collections skip;
shutdown is otherwise as before (atexit handlers, MPI's finalisation among them, flushing
stdout and stderr). What it gives up: objects in reference cycles are not finalised at
exit (no __del__), so a script must close its files itself (the apps write their
--json, --trace and --export files in `with` blocks). For an app script's __main__ only,
never for a function a test or a search calls in a process that goes on.
"""
from __future__ import annotations

import gc
import sys
from contextlib import contextmanager


@contextmanager
def imports_paused():
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.freeze()
            gc.unfreeze()
            gc.enable()


def exit_frozen(code) -> None:
    """sys.exit(code), with every live object frozen first (above)."""
    gc.freeze()
    sys.exit(code)
