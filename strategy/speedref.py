"""The machine's speed at a moment: a fixed torch kernel mix timed in CPU seconds.

On a shared machine the same work takes different CPU time at different moments (other
processes' cache and memory traffic, the host's frequency: Inception's plan() ran 0.43 and
0.88 s CPU minutes apart, docs/benchmarks.md 2026-12-05). A calibration samples the speed
of the moments its traces ran; a run it predicts may run at another. `reference_s()` times
one fixed workload (the kinds of kernel the apps' tasks run: a convolution, matrix
products, LSTM-like gates, a softmax, element-wise updates; one torch thread) on the calling
thread, a few tens of ms; timed beside a run (before and after it, on every rank) it says
how fast the machine was then. It measures the machine, never the case: every case of one
moment gets the same number.

Traces carry it as the metadata event REFERENCE_EVENT per rank (`reference_event`): an
app's --trace run times it on every rank before and after its iterations
(apps/training.py; bench/_sim_accuracy_runs.py also times it around every timed run, and
`add_to_trace` puts timings into a written trace), and
strategy/calibration.py expresses a calibration's times relative to it (docs/simulator.md).
"""
from __future__ import annotations

import json
import statistics
import time

from taskrt.trace import LOAD_EVENT

REFERENCE_EVENT = "soapflow_speed"   # a rank's reference timings in a trace (metadata)
WORKLOAD = "torch-mix-1"             # names the kernel mix below: change it when it changes
REPEATS = 5                          # timed repeats (after one warm-up), median taken

_inputs = None


def _tensors():
    """The workload's inputs: fixed, seeded, made once per process."""
    global _inputs
    if _inputs is None:
        import torch
        g = torch.Generator().manual_seed(0)
        r = lambda *s: torch.randn(*s, generator=g)     # noqa: E731
        _inputs = {"image": r(8, 16, 16, 16), "kernel": r(32, 16, 3, 3),
                   "x": r(64, 256), "w": r(256, 1024), "h": r(64, 256),
                   "u": r(256, 1024), "logits": r(64, 1000), "param": r(256, 1024)}
    return _inputs


def _mix() -> None:
    """One pass of the kernel mix (about 4-8 ms on this machine's cores)."""
    import torch
    import torch.nn.functional as F
    t = _tensors()
    y = F.relu(F.conv2d(t["image"], t["kernel"], padding=1))       # a convolution layer
    F.max_pool2d(y, 2)
    gates = t["x"] @ t["w"] + t["h"] @ t["u"]                       # an LSTM step's gates
    i, f, g, o = gates.chunk(4, dim=1)
    c = torch.sigmoid(f) * t["h"] + torch.sigmoid(i) * torch.tanh(g)
    h = torch.sigmoid(o) * torch.tanh(c)
    grad_w = t["x"].t() @ gates                                     # a weight gradient
    h.t() @ t["x"]
    F.log_softmax(t["logits"], dim=1)                               # a loss
    t["param"].mul(0.9).add_(grad_w, alpha=-0.01)                   # an SGD update


def reference_s(repeats: int = REPEATS) -> float:
    """CPU seconds of one pass of the kernel mix on the calling thread (the median of
    `repeats` after a warm-up), with one torch thread; the thread count is put back."""
    if repeats < 1:
        raise ValueError(f"reference_s: repeats must be at least 1, got {repeats}")
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _mix()                                                      # warm-up
        times = []
        for _ in range(repeats):
            t = time.thread_time()
            _mix()
            times.append(time.thread_time() - t)
    finally:
        torch.set_num_threads(threads)
    return statistics.median(times)


def reference_event(record: dict, rank: int = 0) -> dict:
    """Rank `rank`'s metadata event REFERENCE_EVENT of its reference timings `record` =
    {"before_s", "after_s"} (reference_s() before and after its run); apps/training.py's
    --trace runs write it (write_trace), add_to_trace puts it into a written trace."""
    bad = [k for k in ("before_s", "after_s") if not (
        isinstance(record.get(k), (int, float)) and not isinstance(record.get(k), bool)
        and record[k] > 0)]
    if bad:
        raise ValueError(f"rank {rank}'s reference timings lack positive "
                         f"{', '.join(bad)}: {record}")
    return {"ph": "M", "pid": rank, "name": REFERENCE_EVENT,
            "args": {"before_s": record["before_s"], "after_s": record["after_s"],
                     "workload": WORKLOAD}}


def add_to_trace(path: str, per_rank: list[dict]) -> None:
    """Write a run's reference timings into its trace file: per_rank[r] = {"before_s",
    "after_s"} (reference_s() on rank r before and after the run) becomes rank r's
    metadata event REFERENCE_EVENT (replacing any the trace had)."""
    try:
        added = [reference_event(rec, r) for r, rec in enumerate(per_rank)]
    except ValueError as e:
        raise ValueError(f"add_to_trace: {e}") from None
    with open(path) as f:
        trace = json.load(f)
    events = [e for e in trace.get("traceEvents", []) if e.get("name") != REFERENCE_EVENT]
    events += added
    trace["traceEvents"] = events
    with open(path, "w") as f:
        json.dump(trace, f)


def trace_reference(events: list, path="the trace") -> float | None:
    """The machine's speed while a trace's run ran: the median of every rank's reference
    timings before and after it (REFERENCE_EVENT records); None where the trace has none.
    A record of another workload, or not positive, is refused: its seconds are not
    comparable."""
    values = []
    for e in events:
        if e.get("ph") != "M" or e.get("name") != REFERENCE_EVENT:
            continue
        args = e.get("args") or {}
        if args.get("workload") != WORKLOAD:
            raise ValueError(f"{path}: its speed reference is of workload "
                             f"{args.get('workload')!r}, not {WORKLOAD!r}: not comparable")
        for k in ("before_s", "after_s"):
            v = args.get(k)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
                raise ValueError(f"{path}: its speed reference's {k} must be positive "
                                 f"seconds, got {v!r}")
            values.append(float(v))
    return statistics.median(values) if values else None


def median_reference(records) -> float | None:
    """The median of reference timings {"before_s", "after_s"} (one per rank and run, as
    the benchmark's worker records them beside its timed runs); None without any."""
    values = [float(x) for rec in records for x in (rec["before_s"], rec["after_s"])]
    return statistics.median(values) if values else None


def at_reference_speed(runs) -> float | None:
    """Put every run's times at one speed of the machine: the median of the runs' speed
    references (strategy/speedref.py: CPU seconds of a fixed kernel mix beside each run),
    each run's events (and its load records' seconds, and its iteration) scaled by that
    over its own reference, so that a run made while the machine ran 1.3x slower counts as
    the same work. Returns that reference; None (nothing changed) unless every run has one."""
    refs = [r.reference_s for r in runs]
    if not runs or any(x is None for x in refs):
        return None
    reference = statistics.median(refs)
    for r in runs:
        k = reference / r.reference_s
        events = []
        for e in r.events:
            if e.get("ph") == "X":
                e = dict(e, ts=e["ts"] * k, dur=e["dur"] * k)
            elif e.get("ph") == "M" and e.get("name") == LOAD_EVENT:
                args = dict(e.get("args") or {})
                for f in ("wall_s", "cpu_s", "wait_s"):
                    if isinstance(args.get(f), (int, float)):
                        args[f] *= k
                e = dict(e, args=args)
            events.append(e)
        r.events, r.measured_s = events, r.measured_s * k
    return reference
