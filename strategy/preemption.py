"""Preemption on a shared machine: the OS runs a process's thread in time slices, so a rank
is off its core for whole slices (4-12 ms on this 2-core machine at a load of 7-10) at
moments that have nothing to do with the graph. One process pays that in proportion to its
work: its iteration is its work times the contention (wall seconds per second of work),
which is how a calibrated model prices it (strategy/calibration.py). Several ranks that
exchange data do not: a slice taken from one rank stalls the others at their next exchange
with it, so an iteration of tightly coupled ranks pays the union of every rank's slices.

`expected_makespan` simulates that: each node a rank's thread runs (a task, a local copy
or reduction, the host work of a send, an unpack, an all-reduce's start and wait) is held
up by a whole number of slices drawn so that a thread loses, on average, (contention - 1)
seconds per second of work; messages on links are not. The mean makespan over a few
seeded draws is the prediction. With slices of length 0 every such node takes its time
times the contention (the smooth limit; one simulation), and with contention 1 (an idle
machine) it is the plain simulation.

Ranks also run at different speeds in one iteration, with no slice taken: on 2 ranks of 2
cores at a load of 1.00, RNNLM data parallel's two ranks ran the same 50 tasks in 6.7 and
10.4 ms of one traced iteration, and coupled ranks wait for the slower. `speeds` (one
tuple per recorded iteration: each rank's task time over the iteration's mean,
insitu.rank_speeds) are drawn, a recorded iteration's tuple given to the threads in a
random order, and multiply each thread's task times in that draw: the mean makespan is
then the expected maximum of noisy ranks where the ranks are coupled, not the makespan at
every key's median.
"""
from __future__ import annotations

import math
import random
import statistics

from taskrt.taskgraph import TASK

from .simulator import NodeTimer, simulate


class PreemptedTimer(NodeTimer):
    """NodeTimer whose nodes on a host thread are held up by preemption slices.
    `contention`: one number for every thread, or {thread: contention} (strategy/cores.py:
    ranks sharing cores); a node on several threads (an all-reduce) takes the highest.
    `delays`: {node id: seconds} its post phase (a message's unpack, an all-reduce's wait)
    starts late, its receiver asleep when it arrived (strategy/wakeups.py).
    `collectives`: {node id: (resource, seconds)}: an all-reduce of a gradient bucket
    (strategy/gradbuckets.py) holds `resource` (its bucket's one collective) instead of
    links, `seconds` longer (the collective advancing at its ranks' polls): no thread is
    held, and the links stay free for other messages."""

    def __init__(self, model, costs, contention, slice_s: float,
                 rng: random.Random | None = None, delays: dict | None = None,
                 collectives: dict | None = None, speed: dict | None = None):
        super().__init__(model, costs)
        self.speed = speed or {}        # {thread: multiplier of its task times} (one draw)
        self.threads = {self.host(d) for d in range(model.num_devices)}
        per = dict(contention) if isinstance(contention, dict) else \
            dict.fromkeys(self.threads, contention)
        if any(not c >= 1 for c in per.values()) or slice_s < 0 or set(per) != self.threads:
            raise ValueError(f"PreemptedTimer: contention {contention} must be >= 1 (for "
                             f"every host thread) and the slice {slice_s} s >= 0")
        self.per_thread = per
        self.contention = max(per.values(), default=1.0)
        self.slice_s, self.rng = slice_s, rng or random.Random(0)
        self.delays = delays or {}
        self.collectives = collectives or {}
        # an untraced run's skipped idle points (strategy/untraced.py): no host phases
        self.skipped = getattr(costs, "skipped", frozenset())
        # and the updates it batches after another on their device: one host step a batch
        self.batched = getattr(costs, "batched", frozenset())

    def stalled(self, seconds: float, contention: float | None = None) -> float:
        """`seconds` of a thread's work and the slices taken from it meanwhile."""
        if seconds <= 0:
            return seconds
        c = self.contention if contention is None else contention
        if self.slice_s <= 0:                           # the smooth limit
            return seconds * c
        x = seconds * ((c - 1.0) / self.slice_s)        # expected slices
        whole = math.floor(x)
        return seconds + self.slice_s * (whole + (self.rng.random() < x - whole))

    def _of(self, rs) -> float | None:
        """The highest contention of the threads among resources rs (None: none)."""
        per = self.per_thread
        cs = [per[r] for r in rs if r in per]
        return max(cs) if cs else None

    def timing(self, node):
        d, rs = super().timing(node)
        if self.speed and node.kind is TASK:
            d *= self.speed.get(rs[0], 1.0)
        c = self._of(rs)
        if c is not None:
            d = self.stalled(d, c)
        held = self.collectives.get(node.id) if self.collectives else None
        if held is not None:                # not work: no slices
            resource, wait = held
            return d + wait, (resource,)
        return d, rs

    def host_phases(self, node):
        hd, hr, pd, pr = super().host_phases(node)
        if node.id in self.skipped:
            return 0.0, hr, 0.0, pr
        if node.id in self.batched:
            hd = 0.0
        hd = self.stalled(hd, self._of(hr))             # in this order: the same draws
        pd = self.stalled(pd, self._of(pr))
        if self.delays and pr:
            pd += self.delays.get(node.id, 0.0)     # asleep: not work, no slices
        return hd, hr, pd, pr


def expected_makespan(graph, model, costs, contention, slice_s: float,
                      samples: int = 16, seed: int = 0, delays: dict | None = None,
                      collectives: dict | None = None, speeds: list | None = None,
                      scale: dict | None = None) -> float:
    """The mean makespan of `samples` simulations of graph on `model` (the threads' work:
    task times and host costs without contention) with preemption slices of `slice_s`
    taking (contention - 1) s per second of each thread's work (`contention`: a number, or
    {thread: contention}; `delays` and `collectives` as PreemptedTimer's) and, with
    `speeds` (tuples of the ranks' relative speeds, one per recorded iteration), each
    draw's threads running their tasks at one recorded iteration's speeds (draw_speeds),
    times `scale` ({thread: multiplier}: its rank's repetition, strategy/repetition.py)."""
    top = max(contention.values(), default=1.0) if isinstance(contention, dict) \
        else contention
    smooth = top <= 1.0 or slice_s <= 0
    if smooth and not speeds:
        c = contention if isinstance(contention, dict) else max(contention, 1.0)
        return simulate(graph, model, costs,
                        PreemptedTimer(model, costs, c, 0.0, delays=delays,
                                       collectives=collectives, speed=scale)).makespan
    if smooth:
        contention = contention if isinstance(contention, dict) else max(contention, 1.0)
        slice_s = 0.0
    rng = random.Random(seed)
    threads = sorted({NodeTimer(model, costs).host(d) for d in range(model.num_devices)},
                     key=repr)
    spans = []
    for _ in range(samples):
        speed = draw_speeds(speeds, threads, rng) if speeds else dict(scale or {})
        if speeds and scale:
            speed = {t: x * scale.get(t, 1.0) for t, x in speed.items()}
        spans.append(simulate(graph, model, costs, PreemptedTimer(
            model, costs, contention, slice_s, rng, delays, collectives, speed)).makespan)
    return statistics.fmean(spans)


def draw_speeds(speeds: list, threads: list, rng: random.Random) -> dict:
    """{thread: multiplier}: one recorded iteration's ranks' speeds (a tuple of speeds),
    given to the threads in a random order (a thread without one, when the recorded
    iterations had fewer ranks, runs at 1)."""
    drawn = list(rng.choice(speeds))
    rng.shuffle(drawn)
    return {t: (drawn[i] if i < len(drawn) else 1.0) for i, t in enumerate(threads)}
