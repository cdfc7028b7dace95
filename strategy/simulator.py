"""The execution simulator: times exactly the TaskGraph the executors run.

Resources are the devices' compute units and the machine model's links. Every node occupies
its resources for its duration; each resource serves its nodes FIFO in program order (node id
order), which is the order our executors issue work to a device and the order a CUDA stream
runs it. (The paper's Algorithm 1 orders each queue by ready time instead; a static order
makes delta simulation exactly equal to full simulation by construction, see delta.py.)
A calibrated model of several ranks (host costs, several host threads: NodeTimer.
ready_order) is served in ready order instead, as the MPI executor's ranks run whatever is
ready (strategy/listsched.py); its timeline is still a function of the arrays alone.

  task       on its device; duration from the cost model (measured or analytic)
  copy       on the links of the path between its devices (latency + bytes / slowest link);
             between logical devices of one physical device: a memory copy on that device
  reduce     on its device: reading its inputs and writing the result at memory bandwidth
  allreduce  on the links the machine model says the collective uses (ring/tree/hierarchical)

Host threads: the process (rank) that issues a node's work is a resource too. When the
machine model has host costs (model.host_costs, by node kind; zero in the presets, measured
by `python -m strategy calibrate`), a node first holds the host thread(s) that issue it for
its host cost, then its device resources, and a message between processes then holds the
receiving thread to unpack it:
  task, reduce, copy in one process   the thread of its device, then the device
  copy between processes               the sender's thread ("send"), the links, the
                                       receiver's thread ("recv")
  allreduce                            every member process's thread ("allreduce_start"),
                                       the links, every thread again ("allreduce_wait")
On a CPU device the thread that issues a task also runs it: its host resource is its
compute resource, so host time and task time add up, as they do in the executor.

Memory: a device holds its persistent buffers (weights, optimizer state, inputs, the
graph's results) for the whole iteration, and each temporary (activations, gradients,
partial sums, staging; taskrt.liveness; small ones stay, as in the executors) from the
earliest start to the latest end of its users on the timeline, as the executors allocate
and free them (each temporary's lifetime on the timeline, Liveness.on_timeline, swept by
strategy/memsweep.py's compiled passes: liveness_peak). A
strategy whose peak on a device exceeds its capacity is invalid, and its predicted time is
reported as infinite.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from taskrt.gcpause import gc_paused
from taskrt.liveness import Liveness
from taskrt.othercolumns import other_columns
from taskrt.smallpages import small_pages
from taskrt.taskclasses import TaskClasses
from taskrt.taskgraph import COPY, REDUCE, TASK
from taskrt.trace import TraceEvent, node_label

from .listsched import csr, list_schedule
from .memsweep import liveness_peak
from .timearrays import node_arrays_by_class, timings_one_by_one


@dataclass
class SimResult:
    makespan: float                       # predicted iteration time, seconds (inf if invalid)
    start: np.ndarray                     # per node id, seconds: when it first holds a resource
    end: np.ndarray
    busy: dict[str, float]                # resource name -> seconds busy
    memory: dict[int, int]                # device -> peak bytes live
    over_capacity: dict[int, int] = field(default_factory=dict)   # device -> bytes over
    run: np.ndarray | None = None         # per node: when its device work starts (after host)
    # A full simulation's totals of its graph (traffic_of): bytes of copies between devices
    # and of all-reduces, and the devices some task runs on; None from a delta simulation.
    traffic: dict | None = None

    @property
    def valid(self) -> bool:
        return not self.over_capacity

    @property
    def span(self) -> float:
        """When the last node ends (the makespan, also when memory makes it invalid)."""
        return float(np.max(self.end)) if len(self.end) else 0.0

    def utilization(self) -> dict[str, float]:
        """Busy fraction of the iteration per resource."""
        span = self.makespan if self.makespan and self.makespan != float("inf") else 0.0
        return {k: (v / span if span else 0.0) for k, v in self.busy.items()}


def memory_per_device(graph, start, end, keep=None) -> dict[int, int]:
    """Peak bytes per device over a timeline (node i runs from start[i] to end[i]):
    persistent buffers plus the temporaries live at once (see taskrt.liveness; `keep` as
    there: None keeps the graph's results, as the Trainer does)."""
    with gc_paused():          # it allocates a few objects per class: see taskrt/gcpause.py
        return liveness_peak(*Liveness.on_timeline(graph, start, end, keep))


NO_HOST = (0.0, (), 0.0, ())


_NO_LINE = object()   # NodeTimer._copy_line: the model's copy times are asked per copy


class NodeTimer:
    """Duration and resources of each node on a machine model with a cost model, and its
    host phases (host_phases)."""

    def __init__(self, model, costs):
        self.model, self.costs = model, costs
        self._compute = {}
        self._hosts = {}
        self._copy_lines: dict = {}   # (src, dst) -> a copy's timing as a line in its bytes
        self._tasks: dict = {}        # device -> (its spec, its compute resource as a tuple)
        self.host_costs = dict(getattr(model, "host_costs", None) or {})
        # A calibrated model of several ranks: the MPI executor's ranks run what is ready.
        self.ready_order = bool(self.host_costs) and len(
            {self.host(d) for d in range(model.num_devices)}) > 1

    def host(self, device: int):
        """The host thread resource that issues device's work (a CPU's compute resource)."""
        r = self._hosts.get(device)
        if r is None:
            fn = getattr(self.model, "host_resource", None)
            if self.model.device(device).kind == "cpu" or fn is None:
                r = self.compute(device)
            else:
                r = fn(device)
            self._hosts[device] = r
        return r

    def _host_time(self, kind: str, nbytes: int) -> float:
        c = self.host_costs.get(kind)
        return c.time(nbytes) if c is not None else 0.0

    def host_phases(self, node) -> tuple[float, tuple, float, tuple]:
        """(seconds, host resources) before the node's device work and after it: NO_HOST
        when the model has no host costs."""
        if not self.host_costs:
            return NO_HOST
        kind = node.kind
        if kind is TASK:
            return self._host_time("task", 0), (self.host(node.device),), 0.0, ()
        if kind is REDUCE:
            return self._host_time("reduce", node.nbytes), (self.host(node.device),), 0.0, ()
        if kind is COPY:
            src, dst = self.host(node.src), self.host(node.dst)
            if src == dst:
                return self._host_time("copy", node.nbytes), (src,), 0.0, ()
            return (self._host_time("send", node.nbytes), (src,),
                    self._host_time("recv", node.nbytes), (dst,))
        hosts = tuple(dict.fromkeys(self.host(d) for d in sorted(set(node.devices))))
        return (self._host_time("allreduce_start", node.nbytes), hosts,
                self._host_time("allreduce_wait", node.nbytes), hosts)

    def compute(self, device: int):
        """The compute resource of a device (logical devices may share a physical one)."""
        r = self._compute.get(device)
        if r is None:
            fn = getattr(self.model, "compute_resource", None)
            r = self._compute[device] = fn(device) if fn is not None else f"device {device}"
        return r

    def _memory_time(self, device: int, nbytes: int) -> float:
        spec = self.model.device(device)
        return spec.launch_overhead + nbytes / spec.memory_bandwidth

    def copy_timing(self, src: int, dst: int, nbytes: int) -> tuple[float, tuple]:
        """(seconds, resources) of a copy of nbytes from src to dst: over the links of the
        path, or, when the path has none, a memory copy on src (read and write) on its
        compute. Both are lines in the bytes, start + (scale * nbytes) / bandwidth, kept per
        (src, dst): the link line is the model's transfer_line (its latency and slowest
        bandwidth, the terms transfer_time adds, so the result is transfer_time's bit for
        bit), the memory line _memory_time's terms. A model without transfer_line is asked
        for path and transfer_time per copy."""
        line = self._copy_lines.get((src, dst))
        if line is None:
            line = self._copy_lines[src, dst] = self._copy_line(src, dst)
        if line is _NO_LINE:
            links = self.model.path(src, dst)
            if not links:
                return self._memory_time(src, 2 * nbytes), (self.compute(src),)
            return self.model.transfer_time(nbytes, src, dst), _route(links)
        start, scale, bandwidth, resources = line
        return start + (scale * nbytes) / bandwidth, resources

    def copy_line(self, src: int, dst: int) -> tuple | None:
        """(start, scale, bandwidth, resources): copy_timing's line of copies from src to
        dst (seconds start + (scale * nbytes) / bandwidth, on those resources), or None when
        the model has no transfer_line (copy_timing asks it per copy)."""
        line = self._copy_lines.get((src, dst))
        if line is None:
            line = self._copy_lines[src, dst] = self._copy_line(src, dst)
        return None if line is _NO_LINE else line

    def _copy_line(self, src: int, dst: int) -> tuple:
        """(start, scale, bandwidth, resources) of copies from src to dst (copy_timing), or
        _NO_LINE when the model has no transfer_line."""
        fn = getattr(self.model, "transfer_line", None)
        if fn is None:
            return _NO_LINE
        links, latency, bandwidth = fn(src, dst)
        if not links:
            spec = self.model.device(src)
            return spec.launch_overhead, 2, spec.memory_bandwidth, (self.compute(src),)
        return latency, 1, bandwidth, _route(links)

    def timing(self, node) -> tuple[float, tuple]:
        kind = node.kind
        if kind is TASK:
            task = self._tasks.get(node.device)
            if task is None:
                task = self._tasks[node.device] = (self.model.device(node.device),
                                                   (self.compute(node.device),))
            return self.costs.task_time(node, task[0]), task[1]
        if kind is COPY:
            return self.copy_timing(node.src, node.dst, node.nbytes)
        if kind is REDUCE:
            moved = node.nbytes + sum(node.region.nbytes(i.rect) for i in node.inputs)
            return self._memory_time(node.device, moved), (self.compute(node.device),)
        links = tuple(self.model.links_of_allreduce(node.devices, node.nbytes))
        t = self.model.allreduce_time(node.nbytes, node.devices)
        if not links:
            return t, tuple(self.compute(d) for d in sorted(set(node.devices)))
        return t, links


ROUTE = "route"   # id 0 of every Resources: first of a copy's links when it has several


def _route(links) -> tuple:
    """A copy's resources: its links, in route order after ROUTE when there are several
    (each link a FIFO of its own, listsched._hold), so that a copy queued on one link does
    not hold the others idle."""
    links = tuple(links)
    return (ROUTE,) + links if len(links) > 1 else links


def resource_name(r) -> str:
    return r if isinstance(r, str) else str(getattr(r, "name", r))


class Resources:
    """Resources (device compute units, links) as dense ids for the list scheduler. Id 0
    is ROUTE, no resource: a node whose resources start with it holds the rest as a
    route, each link in turn (strategy/listsched.py's _hold)."""

    def __init__(self):
        self.ids: dict = {ROUTE: 0}
        self.items: list = [ROUTE]

    def id(self, r) -> int:
        i = self.ids.get(r)
        if i is None:
            i = self.ids[r] = len(self.items)
            self.items.append(r)
        return i

    def busy_by_name(self, busy, used) -> dict[str, float]:
        """{resource name: busy seconds} of the resources some node used."""
        return {resource_name(self.items[r]): float(busy[r]) for r in np.flatnonzero(used)
                if self.items[r] is not ROUTE}


def timeline(dur, res_counts, res_ids, pred_ptr, preds, resources: Resources, host=None,
             ready_order: bool = False, checkpoints=None, first: int = 0,
             named: bool = True):
    """(start, run, end, busy by resource name) of nodes in program order
    (strategy.listsched): each starts when its predecessors have ended and its resources are
    free (FIFO per resource in program order, or with `ready_order` in the order the nodes
    become ready: NodeTimer.ready_order), and holds them for its duration. `host`:
    None, or (pre seconds, pre counts, pre ids, post seconds, post counts, post ids) of the
    nodes' host phases. `checkpoints`, `first`: listsched.list_schedule's (a run that
    resumes where the last one's nodes changed: delta simulation). Without `named`, busy is
    the scheduler's array by resource id, for busy_of (delta simulation names it only for
    a change it completes: a search undoes most of its timed changes)."""
    n = len(resources.items)
    phases = None
    if host is not None:
        pre_dur, pre_counts, pre_ids, post_dur, post_counts, post_ids = host
        phases = (pre_dur, csr(pre_counts), pre_ids, post_dur, csr(post_counts), post_ids)
    start, run, end, busy = list_schedule(dur, csr(res_counts), res_ids, pred_ptr, preds, n,
                                          phases, ready_order, checkpoints, first,
                                          resources.ids[ROUTE])
    return start, run, end, busy_of(resources, busy, res_ids, host) if named else busy


def busy_of(resources: Resources, busy, res_ids, host=None) -> dict[str, float]:
    """timeline's busy by resource name, from its busy seconds by resource id (`busy`) and
    the nodes' resource ids (and host phases' ids in `host`, as timeline's): the resources
    some node holds."""
    ids = np.asarray(res_ids, dtype=np.int64)
    if host is not None:
        ids = np.concatenate([ids, np.asarray(host[2], dtype=np.int64),
                              np.asarray(host[5], dtype=np.int64)])
    used = np.bincount(ids, minlength=len(busy)) > 0
    return resources.busy_by_name(busy, used)


def result_of(model, start, end, busy, memory, run=None) -> SimResult:
    """The SimResult of a timeline and the devices' memory needs."""
    over = {}
    for d, b in memory.items():
        cap = model.device(d).memory_capacity
        if b > cap:
            over[d] = b - cap
    makespan = (float(end.max()) if len(end) else 0.0) if not over else float("inf")
    return SimResult(makespan, start, end, busy, memory, over, run)


def simulate(graph, model, costs, timer: NodeTimer | None = None) -> SimResult:
    """Full simulation of one iteration of `graph` (paper Algorithm 1, FIFO in program order)."""
    # (gc: a few objects per node stay alive; numpy's huge pages: arrays of millions of
    # entries made and dropped pass after pass, each fresh page zeroed in 2 MiB: see
    # taskrt/gcpause.py and taskrt/smallpages.py)
    with gc_paused(), small_pages():
        return _simulate(graph, model, costs, timer)


def _simulate(graph, model, costs, timer: NodeTimer | None) -> SimResult:
    timer = timer or NodeTimer(model, costs)
    resources = Resources()
    classes = TaskClasses.of(graph.nodes, getattr(graph, "node_kinds", None))
    if type(timer).timing is NodeTimer.timing and \
            type(timer).host_phases is NodeTimer.host_phases:
        dur, counts, res_ids, host = node_arrays_by_class(graph, classes, timer, resources)
    else:
        dur, counts, res_ids, host = node_arrays(graph, timer, resources)
    pred_ptr, preds = graph.pred_csr()
    start, run, end, busy = timeline(dur, counts, res_ids, pred_ptr, preds, resources,
                                     host, timer.ready_order)
    memory = liveness_peak(*Liveness.on_timeline(graph, start, end, classes=classes))
    result = result_of(model, start, end, busy, memory, run)
    result.traffic = traffic_of(classes, other_columns(graph, classes))
    return result


def traffic_of(classes: TaskClasses, cols) -> dict:
    """{"copy": bytes of the copies between two devices, "allreduce": bytes all-reduced,
    "devices_used": devices some task runs on} from the simulation's columns (the report
    asked 2.6M node objects for them: 0.3-0.5 s of a Megatron GPT@1,024)."""
    between = cols.copy_src != cols.copy_dst
    return {"copy": int(cols.copy_bytes[between].sum()),
            "allreduce": sum(n.nbytes for n in cols.allreduces()),
            "devices_used": int(np.unique(classes.device).size)}


def node_arrays(graph, timer: NodeTimer, resources: Resources) -> tuple:
    """(dur, res_counts, res_ids, host) of every node, asking the timer node by node in
    node order (a timer that overrides timing or host_phases: strategy/preemption.py draws
    random slices per node); `host` is None without host costs, else the host phases as
    timeline takes them. strategy/timearrays.py gives the same per task class."""
    # Resource ids per resource tuple: the nodes of one device, or of one pair of devices,
    # hold the same resources (1,024 point tasks of a launch: one lookup each, not a
    # generator over their resources).
    ids_of: dict = {}

    def ids(rs):
        got = ids_of.get(rs)
        if got is None:
            got = ids_of[rs] = [resources.id(r) for r in rs]
        return got
    dur, counts, res_ids, pre_dur, pre_counts, pre_ids, post_dur, post_counts, post_ids = \
        timings_one_by_one(graph.nodes, timer, ids)       # in id order
    host = (np.array(pre_dur, dtype=np.float64), np.array(pre_counts, dtype=np.int64),
            np.array(pre_ids, dtype=np.int64), np.array(post_dur, dtype=np.float64),
            np.array(post_counts, dtype=np.int64), np.array(post_ids, dtype=np.int64)) \
        if timer.host_costs else None
    return (np.array(dur, dtype=np.float64), np.array(counts, dtype=np.int64),
            np.array(res_ids, dtype=np.int64), host)


def trace_of(graph, result: SimResult, timer: NodeTimer) -> list[TraceEvent]:
    """The simulated timeline as trace events, one track per resource (device or link;
    host phases on their threads' tracks). A copy over a route shows on each of its links
    when it is on its last (the links before may have passed it on earlier)."""
    events = []
    run = result.run if result.run is not None else result.start
    for node in graph.nodes:
        i = node.id
        d, resources = timer.timing(node)
        hd, hosts, pd, posts = timer.host_phases(node)
        label, nbytes = node_label(node), getattr(node, "nbytes", 0)
        for r in (hosts if hd else ()):
            events.append(TraceEvent(i, node.kind, label, resource_name(r), result.start[i],
                                     result.start[i] + hd, nbytes))
        for r in resources:
            if r is ROUTE:
                continue
            events.append(TraceEvent(i, node.kind, label, resource_name(r), run[i],
                                     run[i] + d if posts else result.end[i], nbytes))
        for r in (posts if pd else ()):
            events.append(TraceEvent(i, node.kind, label, resource_name(r),
                                     result.end[i] - pd, result.end[i], nbytes))
    return events
