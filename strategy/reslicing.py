"""Views the one-process executor slices anew every iteration: host time inside a task's
event that depends on the strategy around the task, not on its cost key.

The executor's InstanceStore gives each (region, device) one buffer covering every rect
used there, and each rect a step uses other than the whole buffer a View, whose tensor is
sliced from the buffer's storage (`shaped[slices]`: Python and torch's indexing, 4-6 us a
view here) whenever the buffer gets new storage (taskrt/executor/instances.py: attach,
adopt). The LocalExecutor releases the small buffers of regions it does not keep after
their last use (InstanceStore.make_light) and gives them storage again at their first user,
so every iteration that first user's event re-slices every view of the buffer. A strategy
that cuts a region in several ways on one device (copies between differently split
operators, Red+ pieces) has many views: the Transformer's parameter parallel on 1 process x
4 devices re-slices 936 views an iteration, data parallel none; an `add` part of one cost
key took 9-11 us a node in data parallel's events and 36-52 us in parameter parallel's,
18-31 us of it in allocating a buffer of 6-8 views (measured here). So a key's median over
one strategy's events carries that strategy's views.

`resliced_views` counts them per node from the graph (within 0-10% of the executor's own
count on the benchmark's 49 one-process graphs); `view_cost` fits the seconds a view
costs from recorded runs (a key's events at different counts); `reslicing_time` fits it to
a calibration's runs and gives each run the seconds per node that insitu takes out of its
task events before pricing keys; calibration.predict() puts them back for the graph
predicted. The MPIExecutor keeps its small buffers (no make_light): 4-24
views a rank an iteration on the Transformer's 2 ranks, so several ranks count none.
"""
from __future__ import annotations

import statistics
from collections import defaultdict

from taskrt.privilege import Privilege
from taskrt.settings import Settings
from taskrt.taskgraph import COPY, REDUCE, TASK

_RED = Privilege.REDUCE_SUM
MIN_EVENTS = 3          # events of a key at one count for that count to enter view_cost


def views_used(node):
    """(partial?, region name, device, rect) of every view a node's step asks the store for
    (taskrt/executor/steps.py: task_step, local_copy_step, reduce_step,
    local_allreduce_step; a staging buffer's view is all of it)."""
    kind = node.kind
    if kind is TASK:
        d = node.device
        for req, targets in zip(node.requirements, node.targets):
            if req.privilege is _RED:
                for t in targets:
                    yield t.partial, req.region.name, d, t.piece
            else:
                yield False, req.region.name, d, req.rect
        return
    name = node.region.name
    if kind is COPY:
        if node.reduction:
            yield node.from_partial, name, node.src, node.rect
        else:
            yield False, name, node.src, node.rect
            yield False, name, node.dst, node.rect
        return
    if kind is REDUCE:
        for inp in node.inputs:
            if inp.source != "staged":
                yield inp.source == "partial", name, node.device, inp.rect
        yield False, name, node.device, node.rect
        return
    for d, partial in zip(node.devices, node.in_partial or (False,) * len(node.devices)):
        yield partial, name, d, node.rect
        yield False, name, d, node.rect


def resliced_views(graph, settings: Settings | None = None) -> dict[int, int]:
    """{node id: views it slices anew each iteration} for the LocalExecutor: per buffer of a
    region not initially valid (weights, inputs and optimizer state keep their storage), its
    views other than the whole buffer, charged to the buffer's first user in node order;
    nodes without any are left out. Buffers of at least Settings.min_temporary_bytes (when
    set) are left out too: the executor re-slices them seldom (AlexNet parameter parallel
    on 1 process x 4 devices: 368 views an iteration counted in the executor, 512 with its
    big buffers, 368 without; with the setting 0, as the tests run, every buffer is
    released and re-sliced as a small one is)."""
    small = Settings.resolve(settings).min_temporary_bytes
    views: dict = defaultdict(set)
    first: dict = {}
    for node in graph.nodes:
        for partial, name, d, rect in views_used(node):
            buf = (partial, name, d)
            first.setdefault(buf, node.id)
            whole = (graph.partial_rects if partial else graph.instance_rects)[name, d]
            if rect != whole:
                views[buf].add(rect)
    out: dict = defaultdict(int)
    for (partial, name, d), rects in views.items():
        if name in graph.initial_valid:
            continue
        whole = (graph.partial_rects if partial else graph.instance_rects)[name, d]
        if small and graph.regions[name].nbytes(whole) >= small:
            continue
        out[first[partial, name, d]] += len(rects)
    return dict(out)


def view_cost(samples) -> float:
    """Seconds the executor spends per view it slices, from recorded task events:
    `samples` {cost key: {views of the node: [event seconds]}}. Per key, the median event at
    each count; the median over every key's pairs of counts of the slope between them (a
    key's work is the same at every count; what differs is the views); 0 without such pairs
    (no key ran at two counts) or when the slopes' median is negative. A count enters
    with MIN_EVENTS events at least, a median one preempted event cannot set: a count seen
    once made a slope on its own (a test's single RNNLM recording, its LSTM step at 243 us
    in 7 events and 4.2 ms in the 1 at another count, gave 2 ms a view). Not a cut at a
    multiple of the key's median: a node slicing many views is legitimately many times its
    key's others (cut at 3x, the 2026-12-04 collection's 1 x 2 median went 9.3 -> 9.9%)."""
    slopes = []
    for by_count in samples.values():
        by_count = {n: ts for n, ts in by_count.items() if len(ts) >= MIN_EVENTS}
        if len(by_count) < 2:
            continue
        points = sorted((n, statistics.median(ts)) for n, ts in by_count.items())
        for i, (n0, t0) in enumerate(points):
            for n1, t1 in points[i + 1:]:
                slopes.append((t1 - t0) / (n1 - n0))
    return max(0.0, statistics.median(slopes)) if slopes else 0.0


def reslicing_time(runs) -> float:
    """The seconds a view costs the one-process executor (view_cost, fitted to
    the runs' task events by the views each node re-slices: resliced_views), and each run's
    `executor_s` set to that times its nodes' views, which insitu takes out of their events
    before pricing their keys."""
    counts = {}
    samples: dict = {}
    for r in runs:
        fp = r.graph.fingerprint()
        if fp not in counts:
            counts[fp] = resliced_views(r.graph)
        views = counts[fp]
        nodes = r.graph.nodes
        for e in r.events:
            if e.get("ph") == "X" and "node" in (e.get("args") or {}):
                i = int(e["args"]["node"])
                if nodes[i].kind is TASK:
                    samples.setdefault(nodes[i].cost_key, {}).setdefault(
                        views.get(i, 0), []).append(e["dur"] / 1e6)
    s = view_cost(samples)
    for r in runs:
        r.executor_s = {i: s * n for i, n in counts[r.graph.fingerprint()].items()} if s \
            else {}
    return s
