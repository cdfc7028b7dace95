"""What a launch's reductions leave its readers (coherence.RegionPlanner._reduce_for_reads):
whether a rect's sums make an all-reduce (is_allreduce), and the reads the reductions left
holding all they read (readers_hold), which then need no walk for copies.

A reduction of a read rect onto its one reader that leaves the reader the only holder of
all of the rect (a sum of all of it, or summed pieces covering it), or an all-reduce onto
all its readers, leaves each reader holding its read rect, as a walk for copies would find.
coherence's `held` set says so ((device, rect): nothing to copy), but every set_only_holder
forgets it, so the reductions cannot record it as they go: readers_hold records it after
the launch's last reduction, for a launch whose every read rect was reduced so. No later
reduction of the launch took anything from an earlier one's readers: a later rect meeting
an earlier one is never reduced so, since the earlier reduction retired every sum in its
rect (sums are only added by Red+ tasks, not during a launch's reductions), so no sum is
left where the two meet, and a reduction leaves its reader all of its rect only where sums
cover it. Then copy_in_all finds every read held and makes no compiled call: at Inception
@16, 1,806 of a 300-proposal search's 4,021 compiled calls, each of which found nothing to
copy. HELD_AFTER_REDUCTIONS off (the oracle) walks those reads as any read
(tests/taskrt/test_reduced_reads.py compares the two).
"""
from __future__ import annotations

from collections import defaultdict

# Off: the reads after a launch's reductions walked for copies as any read (the oracle).
HELD_AFTER_REDUCTIONS = True


def is_allreduce(state, rect, devices, contribs, based: bool = True) -> bool:
    """Each reader of `rect` (`devices`) holds a full partial of it in one buffer, nobody
    else holds any, and there is no base value (`based` False: no valid piece of `state`
    meets `rect`)."""
    if len(devices) < 2 or based and state.valid_meets(rect):
        return False
    held = defaultdict(int)
    where = defaultdict(set)
    for _, r, (dev, partial) in contribs:
        held[dev] += r.intersect(rect).volume
        where[dev].add(partial)
    return set(held) == set(devices) and all(v == rect.volume for v in held.values()) \
        and all(len(w) == 1 for w in where.values())


def readers_hold(held: set, by_rect: dict) -> None:
    """After a launch's reductions, each of which left all readers of its rect holding all
    of it (`by_rect`: rect -> its readers, every rect of the launch): enter each (reader,
    rect) in `held` (module doc)."""
    if HELD_AFTER_REDUCTIONS:
        held.update([(device, rect) for rect, devices in by_rect.items() for device in devices])
