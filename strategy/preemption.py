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
"""
from __future__ import annotations

import math
import random
import statistics

from .simulator import NodeTimer, simulate


class PreemptedTimer(NodeTimer):
    """NodeTimer whose nodes on a host thread are held up by preemption slices."""

    def __init__(self, model, costs, contention: float, slice_s: float,
                 rng: random.Random | None = None):
        super().__init__(model, costs)
        if contention < 1 or slice_s < 0:
            raise ValueError(f"PreemptedTimer: contention {contention} must be >= 1 and the "
                             f"slice {slice_s} s >= 0")
        self.contention = contention
        self.rate = (contention - 1.0) / slice_s if slice_s > 0 else 0.0   # slices per s
        self.slice_s, self.rng = slice_s, rng or random.Random(0)
        self.threads = {self.host(d) for d in range(model.num_devices)}

    def stalled(self, seconds: float) -> float:
        """`seconds` of a thread's work and the slices taken from it meanwhile."""
        if seconds <= 0:
            return seconds
        if self.slice_s <= 0:                           # the smooth limit
            return seconds * self.contention
        x = seconds * self.rate                         # expected slices
        whole = math.floor(x)
        return seconds + self.slice_s * (whole + (self.rng.random() < x - whole))

    def timing(self, node):
        d, rs = super().timing(node)
        if any(r in self.threads for r in rs):
            d = self.stalled(d)
        return d, rs

    def host_phases(self, node):
        hd, hr, pd, pr = super().host_phases(node)
        return self.stalled(hd), hr, self.stalled(pd), pr


def expected_makespan(graph, model, costs, contention: float, slice_s: float,
                      samples: int = 16, seed: int = 0) -> float:
    """The mean makespan of `samples` simulations of graph on `model` (the threads' work:
    task times and host costs without contention) with preemption slices of `slice_s`
    taking (contention - 1) s per second of each thread's work."""
    if contention <= 1.0 or slice_s <= 0:
        return simulate(graph, model, costs, PreemptedTimer(model, costs, max(contention, 1.0),
                                                            0.0)).makespan
    rng = random.Random(seed)
    return statistics.fmean(
        simulate(graph, model, costs, PreemptedTimer(model, costs, contention, slice_s,
                                                     rng)).makespan
        for _ in range(samples))
