"""A rank's speed from how often it repeats its work (issue 21; docs/simulator.md "A rank's
speed follows its mix of work"): on several ranks a key's task ran faster on a rank that
repeats its work more (tasks per distinct cost key on the rank; Inception on 2 ranks,
correlated 0.97 with the rank's speed), log time against log repetition with a slope b of
-0.21 on 2 ranks in both folds of the ninth collection.

  repetition    {rank: tasks per distinct cost key} of a graph's task nodes;
  fit_slope     b from recorded runs: per (app, cost key) timed at 2+ repetitions, each
                event's log time against its rank's log repetition, both about the key's
                own centre (the key's effect removed), one least-squares slope;
  stable_slope  b where the runs agree on it, else 0: b fitted on all the runs and again
                leaving out each recorded graph (a strategy of an app) in turn; every b of
                one sign and within STABLE times of each other (decided from the
                calibrating runs alone);
  run_scale     {node id: (its rank's repetition / ref)^b} of a run's task nodes: calibrate
                divides each task event by it before its key is priced (keys priced at
                repetition `ref`, the runs' centre), predict multiplies each thread's
                tasks by thread_scale's.
Also same_graph: the runs grouped by the graph they ran (one case, several runs)."""

import math

from taskrt.taskgraph import TASK

STABLE = 2.0        # leave-one-out slopes at most this many times apart
MIN_EVENTS = 30     # fewer events at 2+ repetitions of a key: no slope


def same_graph(runs) -> list[list]:
    """The runs grouped by the graph they ran (app and TaskGraph.fingerprint()), in the
    order each graph first appears: several traced runs of one strategy are one case."""
    groups: dict = {}
    for r in runs:
        groups.setdefault((r.app, r.graph.fingerprint()), []).append(r)
    return list(groups.values())


def repetition(graph, per_rank: int) -> dict:
    """{rank: its task nodes per distinct cost key} (rank = device // per_rank)."""
    tasks: dict = {}
    keys: dict = {}
    for n in graph.nodes:
        if n.kind is TASK:
            rank = n.device // per_rank
            tasks[rank] = tasks.get(rank, 0) + 1
            keys.setdefault(rank, set()).add(n.cost_key)
    return {rank: tasks[rank] / len(keys[rank]) for rank in tasks}


def from_record(value) -> tuple[float, float]:
    """(b, ref) as a machine file's prediction record keeps them: two finite numbers, ref > 0
    (ValueError naming the value otherwise: calibration.fit_from_files refuses the file)."""
    if not isinstance(value, (list, tuple)) or len(value) != 2 or \
            any(type(x) not in (int, float) or not math.isfinite(x) for x in value) or \
            value[1] <= 0:
        raise ValueError(f"repetition {value!r} is not [slope, reference > 0]")
    return float(value[0]), float(value[1])


def _points(run, rep: dict) -> dict:
    """{(app, cost key): [(log repetition of its rank, log seconds)]} of a run's task events
    (`rep`: the run's repetition by rank)."""
    out: dict = {}
    nodes = run.graph.nodes
    for e in run.events:
        if e.get("ph") == "X" and "node" in (e.get("args") or {}) and e["dur"] > 0:
            n = nodes[int(e["args"]["node"])]
            if n.kind is TASK:
                out.setdefault((run.app, n.cost_key), []).append(
                    (math.log(rep[n.device // run.per_rank]), math.log(e["dur"])))
    return out


def _slope(per_run: list) -> tuple[float, float]:
    """(b, ref) of fit_slope over runs given as their _points."""
    merged: dict = {}
    for pts in per_run:
        for key, xy in pts.items():
            merged.setdefault(key, []).extend(xy)
    sxy = sxx = 0.0
    xs_all, n = [], 0
    for pts in merged.values():
        xs_all.extend(x for x, _ in pts)
        if len({x for x, _ in pts}) < 2:
            continue
        mx = sum(x for x, _ in pts) / len(pts)
        for x, y in pts:                # sum (x - mx) = 0: y's centre drops out
            sxy += (x - mx) * y
            sxx += (x - mx) ** 2
        n += len(pts)
    ref = math.exp(sum(xs_all) / len(xs_all)) if xs_all else 1.0
    if n < MIN_EVENTS or sxx <= 0:
        return 0.0, ref
    return sxy / sxx, ref


def fit_slope(runs) -> tuple[float, float]:
    """(b, ref): log time against log repetition, key effects removed (module doc), and the
    runs' centre repetition (geometric mean over the events); (0, 1) with too few events."""
    return _slope([_points(r, repetition(r.graph, r.per_rank)) for r in runs])


def stable_slope(runs) -> tuple[float, float]:
    """(b, ref) of fit_slope where the slope is stable within the runs (module doc), else
    (0, ref). One process (a thread for every device) or fewer than 3 graphs: b = 0. Each
    run's events are read once, for the fit on all runs and every leave-one-out fit."""
    points = {id(r): _points(r, repetition(r.graph, r.per_rank)) for r in runs}
    b, ref = _slope(list(points.values()))
    groups = same_graph(runs)
    if b == 0.0 or len(groups) < 3 or any(r.ranks < 2 for r in runs):
        return 0.0, ref
    out = [_slope([points[id(r)] for g in groups if g is not left for r in g])[0]
           for left in groups]
    if any(x * b <= 0 for x in out) or \
            max(abs(x) for x in out) > STABLE * min(abs(x) for x in out):
        return 0.0, ref
    return b, ref


def priced_at_repetition(runs, on: bool = True) -> tuple[float, float]:
    """(b, ref) of stable_slope (with `on`; else (0, 1)), each run's task_scale set by it
    (run_scale: calibrate prices the keys from its events over it)."""
    b, ref = stable_slope(runs) if on else (0.0, 1.0)
    for r in runs:
        r.task_scale = run_scale(r.graph, r.per_rank, b, ref)
    return b, ref


def run_scale(graph, per_rank: int, b: float, ref: float) -> dict:
    """{node id: (its rank's repetition / ref)^b} of graph's task nodes ({} when b = 0)."""
    if not b:
        return {}
    rep = repetition(graph, per_rank)
    return {n.id: (rep[n.device // per_rank] / ref) ** b for n in graph.nodes
            if n.kind is TASK}


def thread_scale(graph, per_rank: int, b: float, ref: float, host) -> dict:
    """{host thread: (its rank's repetition / ref)^b} for predict(); `host(device)` names a
    device's thread ({} when b = 0)."""
    if not b:
        return {}
    rep = repetition(graph, per_rank)
    return {host(d): (rep[d // per_rank] / ref) ** b
            for d in {n.device for n in graph.nodes if n.kind is TASK}}
