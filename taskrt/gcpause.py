"""gc_paused(): run a block with Python's cyclic garbage collector switched off.

Planning allocates hundreds of thousands of small objects that all stay alive (rects, index
items, nodes). Each of them counts towards the collector's thresholds, so a large plan set
off several full collections that walk every live object of the process (the model, torch,
the graph so far): about half of all planning time. The planner creates no garbage cycles
that need collecting mid-plan, so the planner and the simulator pause the collector while
they work; it runs again as usual afterwards. Nesting is fine: only the outermost block
switches it back on.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def gc_paused():
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
