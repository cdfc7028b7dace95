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
def gc_paused(long_lived: bool = False):
    """`long_lived`: what the block allocates lives on after it (a --simulate prediction's
    lowering, graph and timeline). Then, at the end of the outermost pause, the objects move
    straight to the oldest generation (gc.freeze, gc.unfreeze) instead of staying young: the
    first collection after a pause otherwise walks everything allocated during it (1-2 s of
    a 12 s GPT-3 2.7B prediction on 128 GPUs). Not for a search's proposals: their garbage
    cycles are best collected young."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if long_lived:
                gc.freeze()
                gc.unfreeze()
            gc.enable()
