"""Replay: a recorded real run simulated on the very graph it executed, predicted vs measured
per node, per kind, per operator and in total (`replay` -> ReplayReport).

A real run's `--trace FILE` (apps/training.py write_trace) holds the executor's events of
the last iteration (one per node and rank, with the node id) and, under "otherData", what
ran: app, flags, ranks, devices per rank, the strategy's content and the graph's
fingerprint. Replay rebuilds the graph from those (the app's own builder, lowering and
planner), refuses a trace whose fingerprint or node names differ, and simulates the graph on
a machine model (default `local`, calibrated now; a model with one device per rank gets the
run's devices per rank as logical devices on it, see logical_devices.py; a bigger model
lends its first devices) with the cost model
(measured times from a profile when given). The workload (an app's name, or a file defining
APP) is found through strategy/workload.py, as the other tools find it.

    rep = replay(None, None, "run.json")          # app and flags from the trace
    print(rep.text()); rep.write_chrome("both.json")
"""
from __future__ import annotations

import json
import math
import statistics
import warnings
from dataclasses import dataclass, field

from parallel_ops.lowering import lower
from taskrt import Machine, plan
from taskrt.taskgraph import TASK
from taskrt.trace import node_label, to_chrome

from . import files as strategy_files
from .costs import CostModel, CostWarning, Profile
from .costs.profile import Measurement
from .logical_devices import shared
from .machines import machine_model
from .simulator import NodeTimer, simulate, trace_of
from .workload import WorkloadError, load_workload


class ReplayError(ValueError):
    """A trace cannot be replayed: unreadable, or recorded from another graph or layout."""


@dataclass
class NodeTimes:
    id: int
    kind: str
    name: str
    operator: str                 # operator (or weight) of a task; region stem otherwise
    measured_s: float | None      # None: no event of this node in the trace
    predicted_s: float
    measured_start_s: float | None
    predicted_start_s: float

    @property
    def difference_s(self) -> float:
        return self.predicted_s - (self.measured_s or 0.0)


@dataclass
class ReplayReport:
    app: str
    argv: list
    layout: str                   # "1 rank x 2 devices"
    machine: str
    fingerprint: str
    nodes: list[NodeTimes]
    measured_total_s: float       # the iteration's span in the trace (longest rank)
    predicted_total_s: float      # the simulated makespan (timeline end when invalid)
    valid: bool                   # False: memory over capacity on the model
    measured_chrome: list = field(repr=False, default_factory=list)
    predicted_chrome: list = field(repr=False, default_factory=list)

    def groups(self, by: str) -> list[tuple[str, int, float, float]]:
        """(name, nodes, measured s, predicted s) per kind or operator, largest |difference|
        first; nodes without a measurement are left out."""
        acc: dict = {}
        for n in self.nodes:
            if n.measured_s is None:
                continue
            g = acc.setdefault(getattr(n, by), [0, 0.0, 0.0])
            g[0] += 1
            g[1] += n.measured_s
            g[2] += n.predicted_s
        rows = [(k, c, m, p) for k, (c, m, p) in acc.items()]
        return sorted(rows, key=lambda r: -abs(r[3] - r[2]))

    def compared(self) -> list[NodeTimes]:
        """Nodes with a measurement, largest |predicted - measured| first."""
        return sorted((n for n in self.nodes if n.measured_s is not None),
                      key=lambda n: -abs(n.difference_s))

    def text(self, top: int = 12) -> str:
        def ms(s):
            return f"{1e3 * s:9.3f} ms"

        def rel(m, p):
            return f"{100 * (p - m) / m:+7.1f}%" if m > 0 else "      -"
        mt, pt = self.measured_total_s, self.predicted_total_s
        nodes = self.compared()
        sm, sp = sum(n.measured_s for n in nodes), sum(n.predicted_s for n in nodes)
        lines = [f"Replay of {self.app} {' '.join(self.argv)}".rstrip() +
                 f": {self.layout}, {len(self.nodes)} nodes, graph {self.fingerprint[:12]}",
                 f"  simulated on {self.machine}" +
                 ("" if self.valid else " (INVALID there: memory over capacity)"),
                 f"  iteration     measured {ms(mt)}, predicted {ms(pt)} ({rel(mt, pt).strip()})",
                 f"  sum of nodes  measured {ms(sm)}, predicted {ms(sp)} ({rel(sm, sp).strip()})"
                 f"; {len(self.nodes) - len(nodes)} node(s) without a measurement"]
        for by in ("kind", "operator"):
            rows = self.groups(by)
            lines.append(f"  per {by} ({len(rows)}, largest differences first): nodes, "
                         "measured, predicted")
            for name, c, m, p in rows[:top]:
                lines.append(f"    {name[:36]:<36} {c:5d} {ms(m)} {ms(p)} {rel(m, p)}")
        lines.append(f"  per node (largest differences first): id, measured, predicted")
        for n in nodes[:top]:
            lines.append(f"    {n.id:5d} {n.name[:44]:<44} {ms(n.measured_s)} "
                         f"{ms(n.predicted_s)} {rel(n.measured_s, n.predicted_s)}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        def rows(by):
            return [{by: k, "nodes": c, "measured_s": m, "predicted_s": p}
                    for k, c, m, p in self.groups(by)]
        return {"app": self.app, "argv": list(self.argv), "layout": self.layout,
                "machine": self.machine, "fingerprint": self.fingerprint,
                "valid": self.valid, "measured_total_s": self.measured_total_s,
                "predicted_total_s": self.predicted_total_s,
                "kinds": rows("kind"), "operators": rows("operator"),
                "nodes": [{"id": n.id, "kind": n.kind, "name": n.name,
                           "operator": n.operator, "measured_s": n.measured_s,
                           "predicted_s": n.predicted_s,
                           "measured_start_s": n.measured_start_s,
                           "predicted_start_s": n.predicted_start_s} for n in self.nodes]}

    def write_chrome(self, path: str) -> None:
        """Both timelines in one Chrome trace: measured ranks, then the prediction."""
        with open(path, "w") as f:
            json.dump({"traceEvents": self.measured_chrome + self.predicted_chrome,
                       "displayTimeUnit": "ms"}, f)


def read_trace(path: str) -> tuple[list[dict], dict]:
    """(Chrome events, the run's record or {}) of a --trace file of a real run."""
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise ReplayError(f"trace {path}: cannot read it ({e.strerror or e})") from None
    except ValueError as e:
        raise ReplayError(f"trace {path}: not JSON ({e}); give the file a run wrote with "
                          "--trace FILE") from None
    events = data.get("traceEvents") if isinstance(data, dict) else None
    if not isinstance(events, list):
        raise ReplayError(f"trace {path}: no \"traceEvents\" list; give the file a run wrote "
                          "with --trace FILE")
    run = (data.get("otherData") or {}).get("soapflow") or {}
    if run.get("simulated"):
        raise ReplayError(f"trace {path}: a simulated timeline (--simulate); replay needs "
                          "the trace of a real run")
    return events, run


def _workload(name: str):
    try:
        return load_workload(name)
    except WorkloadError as e:
        raise ReplayError(f"replay: app '{name}': {e}") from None


def _rebuild(workload, argv, run, path, layout):
    """(built workload, runtime machine, graph) of the recorded run."""
    ranks, per_rank, kind = layout
    machine = Machine.grid(ranks, per_rank, kind)
    try:
        built = workload.build_from_flags(list(argv), len(machine),
                                          int(run["batch_size"]) if run.get("batch_size")
                                          else None)
        if "strategy" in run:
            sf = strategy_files.from_dict(run["strategy"], f"trace {path}")
            found = strategy_files.problems(sf, built.model, machine)
            if found:
                raise ReplayError(f"trace {path}: its strategy does not fit {workload.name} "
                                  "built with these flags:\n  - " + "\n  - ".join(found))
            strategy = dict(sf.configs)
        else:
            strategy = strategy_files.load(built.strategy_file, built.model, machine) \
                if built.strategy_file else {}
    except (WorkloadError, strategy_files.StrategyFileError) as e:
        raise ReplayError(f"trace {path}: cannot rebuild {workload.name} {' '.join(argv)}: "
                          f"{e}") from None
    lowered = lower(built.model, strategy, machine, built.optimizer)
    return built, machine, plan(lowered.launches, machine, initial=lowered.initial)


def _operator(node) -> str:
    if node.kind is TASK:
        return node.launch.name.split("/")[0]
    return node.region.name.split("@")[0]


def measured_times(events: list[dict]) -> tuple[dict, float]:
    """Per node (start, longest duration) in seconds, and the longest rank's span."""
    per_node: dict = {}
    spans: dict = {}
    for e in events:
        if e.get("ph") != "X" or "node" not in (e.get("args") or {}):
            continue
        i, start, dur = int(e["args"]["node"]), e["ts"] / 1e6, e["dur"] / 1e6
        s, d = per_node.get(i, (start, 0.0))
        per_node[i] = (min(s, start), max(d, dur))
        lo, hi = spans.get(e.get("pid", 0), (math.inf, -math.inf))
        spans[e.get("pid", 0)] = (min(lo, start), max(hi, start + dur))
    total = max((hi - lo for lo, hi in spans.values()), default=0.0)
    return per_node, total


def _check_same_graph(graph, run: dict, events: list[dict], path: str) -> None:
    fp = run.get("fingerprint")
    if fp and fp != graph.fingerprint():
        raise ReplayError(f"trace {path}: recorded from another graph (fingerprint {fp[:12]}, "
                          f"rebuilt {graph.fingerprint()[:12]}, {run.get('nodes', '?')} vs "
                          f"{len(graph.nodes)} nodes). Replay with the app, flags and "
                          "strategy of the recorded run, and the same soapflow version.")
    for e in events:
        if e.get("ph") != "X" or "node" not in (e.get("args") or {}):
            continue
        i = int(e["args"]["node"])
        if not 0 <= i < len(graph.nodes) or e.get("name") != node_label(graph.nodes[i]):
            have = node_label(graph.nodes[i]) if 0 <= i < len(graph.nodes) else "no such node"
            raise ReplayError(f"trace {path}: event '{e.get('name')}' of node {i} does not "
                              f"match the rebuilt graph ({have}); the trace was recorded "
                              "from another graph")


def recorded(app_name, argv, trace_path):
    """(workload, argv, (ranks, devices per rank, kind), built workload, graph, events, run
    record) of a recorded run, its graph rebuilt and checked against the trace; the run
    record is the trace's "otherData" soapflow record (apps/training.py write_trace)."""
    events, run = read_trace(trace_path)
    app_name = app_name or run.get("app")
    argv = list(run.get("argv", []) if argv is None else argv)
    if not app_name:
        raise ReplayError(f"trace {trace_path}: it does not say which app ran; pass the app's "
                          "name and flags")
    workload = _workload(app_name)
    ranks = int(run.get("ranks") or len({e.get("pid", 0) for e in events if e.get("ph") == "X"})
                or 1)
    per_rank = int(run.get("devices_per_rank") or
                   _devices_per_rank(workload, argv, ranks, trace_path))
    kind = run.get("device_kind", "cpu")
    built, machine, graph = _rebuild(workload, argv, run, trace_path, (ranks, per_rank, kind))
    _check_same_graph(graph, run, events, trace_path)
    return workload, argv, (ranks, per_rank, kind), built, graph, events, run


def task_durations(graph, events, into: dict | None = None) -> dict:
    """{cost key: [seconds of each task event with that key]} of a run's trace events."""
    durations = {} if into is None else into
    for e in events:
        if e.get("ph") == "X" and "node" in (e.get("args") or {}):
            node = graph.nodes[int(e["args"]["node"])]
            if node.kind is TASK:
                durations.setdefault(node.cost_key, []).append(e["dur"] / 1e6)
    return durations


def profile_from_trace(trace_path: str, app_name: str | None = None, argv=None) -> Profile:
    """Task costs measured in situ: per cost key, the median duration of the recorded run's
    task nodes with that key (every rank's events), filed under "cpu". A task runs slower
    inside an iteration than in the profiler's repeats of it alone (docs/simulator.md), so
    these are the costs to simulate that run's graph, or graphs sharing its parts, with.
    Only CPU runs: on a GPU the executor records the host's time to issue a task, not the
    kernel's.

        prof = profile_from_trace("run.json"); prof.save("run.profile")
    """
    workload, argv, (ranks, per_rank, run_kind), _, graph, events, _ = recorded(
        app_name, argv, trace_path)
    if run_kind != "cpu":
        raise ReplayError(f"trace {trace_path}: recorded on {run_kind} devices, whose events "
                          "time the host's issue of each task, not the kernels; take in-situ "
                          "costs from a CPU run, or profile the GPU (python -m strategy.costs "
                          "profile APP --device cuda)")
    kind = "cpu"
    durations = task_durations(graph, events)
    if not durations:
        raise ReplayError(f"trace {trace_path}: no task events to take costs from")
    prof = Profile(meta={"runs": [{"source": "trace", "trace": str(trace_path),
                                   "app": workload.name, "argv": list(argv), "kind": kind,
                                   "layout": f"{ranks}x{per_rank}"}]})
    for key, ts in durations.items():
        prof.add(key, kind, Measurement(statistics.median(ts), len(ts), min(ts), max(ts)))
    return prof


def replay(app_name: str | None, argv, trace_path: str, machine_spec="local",
           profile: str | None = None) -> ReplayReport:
    """Simulate the graph of a recorded run and compare it with the run's trace. `app_name`
    and `argv` default to what the trace records; `machine_spec` is a preset, a file,
    'local', or a MachineModel."""
    workload, argv, (ranks, per_rank, _), built, graph, events, _ = recorded(app_name, argv,
                                                                    trace_path)
    model = model_for_layout(machine_model(machine_spec) if isinstance(machine_spec, str)
                             else machine_spec, ranks, per_rank)
    costs = CostModel(Profile.load(profile) if profile else None, int_ranges=built.int_ranges)
    timer = NodeTimer(model, costs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CostWarning)
        result = simulate(graph, model, costs, timer)

    measured, measured_total = measured_times(events)
    nodes = []
    for node in graph.nodes:
        m = measured.get(node.id)
        nodes.append(NodeTimes(node.id, node.kind, node_label(node), _operator(node),
                               m[1] if m else None,
                               result.end[node.id] - result.start[node.id],
                               m[0] if m else None, result.start[node.id]))
    pid = max((e.get("pid", 0) for e in events), default=0) + 1
    predicted = [dict(e, pid=pid) for e in to_chrome(
        trace_of(graph, result, timer), process_name=f"predicted on {model}")["traceEvents"]]
    measured_chrome = [dict(e, args={"name": f"measured rank {e.get('pid', 0)}"})
                       if e.get("ph") == "M" and e.get("name") == "process_name" else e
                       for e in events]
    return ReplayReport(workload.name, argv, f"{ranks} rank{'s' if ranks > 1 else ''} x "
                        f"{per_rank} device{'s' if per_rank > 1 else ''}", str(model),
                        graph.fingerprint(), nodes, measured_total,
                        result.makespan if result.valid else result.span,
                        result.valid, measured_chrome, predicted)


def model_for_layout(model, ranks: int, per_rank: int):
    """The model a run of `ranks` ranks x `per_rank` devices is simulated on: a model with
    one device per rank gets the run's devices as logical devices on it (logical_devices.py);
    a bigger model lends its first devices."""
    if model.num_devices == ranks and per_rank > 1:
        return shared(model, per_rank)
    if model.num_devices < ranks * per_rank:
        raise ReplayError(f"the run had {ranks} rank(s) x {per_rank} device(s); machine "
                          f"'{model.name}' has {model.num_devices} device(s). Give a model with "
                          f"one device per rank ({ranks}: 'local' under mpirun -np {ranks}, or "
                          f"a file saved from it) or at least one per device "
                          f"({ranks * per_rank}).")
    return model


def _devices_per_rank(workload, argv, ranks: int, path: str) -> int:
    """--devices-per-rank of a run's flags (traces without a record of the layout)."""
    try:
        return workload.build_from_flags(list(argv), ranks).devices_per_rank
    except WorkloadError as e:
        raise ReplayError(f"trace {path}: cannot rebuild {workload.name} {' '.join(argv)}: "
                          f"{e}") from None
