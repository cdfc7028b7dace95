"""Trace: what ran where and when, from a real run or a simulation, in one format.

Times are seconds from the start of the run. `to_chrome` writes the Chrome/Perfetto
trace-event JSON (one track per device, and per link for transfers).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from .taskgraph import ALLREDUCE, COPY, TASK


@dataclass(frozen=True, slots=True)
class TraceEvent:
    node: int            # TaskGraph node id
    kind: str            # task, copy, reduce, allreduce
    name: str            # short description
    track: str           # "device 3", "link 0->2", "group 0,1,2,3"
    start: float
    end: float
    nbytes: int = 0

    @property
    def duration(self) -> float:
        return self.end - self.start


def node_label(node) -> str:
    """A short name for a TaskGraph node in a timeline."""
    if node.kind is TASK:
        return f"{node.launch.name}{list(node.color)}"
    return f"{node.kind} {node.region.name}{node.rect}"


def node_track(node) -> str:
    """The track a node's event is drawn on in a real run: its device, link or group."""
    if node.kind is COPY:
        return f"link {node.src}->{node.dst}"
    if node.kind is ALLREDUCE:
        return "group " + ",".join(map(str, node.devices))
    return f"device {node.device}"


def to_chrome(events: list[TraceEvent], process_name: str = "taskrt") -> dict:
    """Chrome trace-event JSON (load it in chrome://tracing or ui.perfetto.dev)."""
    tracks = sorted({e.track for e in events})
    tid = {t: i for i, t in enumerate(tracks)}
    out = [{"ph": "M", "pid": 0, "name": "process_name", "args": {"name": process_name}}]
    out += [{"ph": "M", "pid": 0, "tid": tid[t], "name": "thread_name", "args": {"name": t}}
            for t in tracks]
    for e in events:
        out.append({"ph": "X", "pid": 0, "tid": tid[e.track], "name": e.name, "cat": e.kind,
                    "ts": e.start * 1e6, "dur": max(e.duration, 0.0) * 1e6,
                    "args": {"node": e.node, "bytes": e.nbytes}})
    return {"traceEvents": out, "displayTimeUnit": "ms"}


def write_chrome(path: str, events: list[TraceEvent], process_name: str = "taskrt") -> None:
    with open(path, "w") as f:
        json.dump(to_chrome(events, process_name), f)
