"""Host costs from recorded runs (strategy/calibration.py, docs/simulator.md "host costs"):
per node kind, the executor's own time between one event and the next on a rank (the median
gap before events of that kind: longer gaps are waits for a message, which the simulator
models itself, or preemptions, which calibration's contention counts) plus, for nodes whose
whole event is host work (send = pack + Isend, recv = unpack, an all-reduce's start), the
event itself as seconds + per_byte * bytes, and for local copies and reductions what the
event takes beyond the device model's memory time. Kinds are those of the simulator's host
model (simulator.NodeTimer.host_phases).
"""
from __future__ import annotations

import statistics

import numpy as np

from taskrt.taskgraph import ALLREDUCE, COPY

from .insitu import _line
from .machines import HostCost


def host_kind(node, rank: int, machine) -> str:
    """The host-cost kind of a node's event on `rank` (simulator.NodeTimer.host_phases)."""
    if node.kind is COPY:
        src, dst = machine.devices[node.src].rank, machine.devices[node.dst].rank
        if src == dst:
            return "copy"
        return "send" if rank == src else "recv"
    if node.kind is ALLREDUCE:
        return "allreduce_start"
    return node.kind


# Kinds whose whole event is host work (no device phase is timed in it).
ALL_HOST = ("send", "recv", "allreduce_start")


def host_samples(run, device_time) -> dict:
    """kind -> list of (gap before the event, event seconds beyond the modelled device time,
    bytes) over every rank's events of a calibration.RecordedRun; `device_time(node)` is the
    device phase the model gives a node whose event holds one (local copies, reductions)."""
    per_rank: dict = {}
    for e in run.events:
        if e.get("ph") == "X" and "node" in (e.get("args") or {}):
            per_rank.setdefault(e.get("pid", 0), []).append(e)
    out: dict = {}
    g = run.graph
    for rank, evs in per_rank.items():
        evs.sort(key=lambda e: e["ts"])
        prev_end = None
        for e in evs:
            node = g.nodes[int(e["args"]["node"])]
            start, dur = e["ts"] / 1e6, e["dur"] / 1e6
            gap = max(0.0, start - prev_end) if prev_end is not None else None
            prev_end = start + dur
            kind = host_kind(node, rank, g.machine)
            one_rank = kind == "allreduce_start" and len(
                {g.machine.devices[d].rank for d in node.devices}) == 1
            if kind == "task":
                extra = 0.0                       # the event is the task's in-situ time
            elif kind in ALL_HOST and not one_rank:
                extra = dur
            else:
                extra = dur - device_time(node)
            out.setdefault(kind, []).append((gap, extra, getattr(node, "nbytes", 0)))
    return out


def _typical_gap(gaps) -> float:
    """The median gap: the executor's own time per node, without the waits for a message
    and the preemptions (a 12 ms gap among 15 us ones on a shared machine; contention()
    accounts for those) that a mean would spread over every node."""
    return statistics.median(gaps) if gaps else 0.0


def fit_host_costs(samples: dict) -> tuple[dict, dict, dict]:
    """(kind -> HostCost, kind -> sample count, kind -> (25%, 75%) of per-node cost)."""
    costs, counts, spread = {}, {}, {}
    for kind, rows in samples.items():
        gaps = [g for g, _, _ in rows if g is not None]
        gap = _typical_gap(gaps)
        if kind == "task":
            a, b = 0.0, 0.0
        else:
            a, b = _line([n for _, _, n in rows], [x for _, x, _ in rows])
        costs[kind] = HostCost(gap + a, b)
        per_node = [(g or 0.0) + max(0.0, x) for g, x, _ in rows]
        q = np.percentile(per_node, [25, 75]) if per_node else (0.0, 0.0)
        counts[kind], spread[kind] = len(rows), (float(q[0]), float(q[1]))
    return costs, counts, spread
