"""imports_paused(): an app script's start-up imports (torch, the apps, the simulator) with
Python's cyclic garbage collector paused.

Importing torch and this project makes a few hundred thousand objects that live as long as
the process (modules, functions, torch's operator registrations), and they set off three
full collections, each walking everything imported so far: 0.1-0.25 s of CPU before a
`--simulate` run does anything (GPT-3 2.7B on 128 GPUs). As taskrt.gcpause.gc_paused
(long_lived=True) does for a prediction, the collector is off while the imports run and
what they made moves to the oldest generation at the end. This module imports nothing
but the standard library: it runs before torch is imported (taskrt's gcpause cannot: its
package imports the planner, and with it torch).
"""
from __future__ import annotations

import gc
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
