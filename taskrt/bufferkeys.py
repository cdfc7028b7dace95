"""Buffer identity: the keys of the buffers a TaskGraph node uses and writes, and what
depends on them alone (a task's regions read and written, the bytes of a key, where a task
may write a view instead of a copy).

A key is (kind, region name, device, extra): kind INSTANCE or PARTIAL (a region's instance
or partial-sum buffer on the device; extra None), STAGING (a reduction copy's staging buffer
on its destination; extra the copy node) or STATE (a point task's saved state; extra
(color, bytes)). taskrt/liveness.py says which buffers are temporaries and the peak memory;
taskrt/bufferuses.py lists a whole graph's buffers and uses as arrays, per task class.
"""
from __future__ import annotations

from .privilege import Privilege
from .taskgraph import COPY, REDUCE, TASK

INSTANCE, PARTIAL, STAGING, STATE = 0, 1, 2, 3

_READS = (Privilege.READ, Privilege.READ_WRITE)
_READ = Privilege.READ


def state_key(node):
    """The key of the saved state a task keeps or takes, or None: (STATE, the keeping
    launch's name + "@state", device, (color, bytes))."""
    launch = node.launch
    held = launch.saved_bytes
    if not held:
        return None
    nbytes = held.get(node.color, 0)
    if not nbytes:
        return None
    return (STATE, (launch.state_from or launch.name) + "@state", node.device,
            (node.color, nbytes))


def own_bytes(key) -> int:
    """Bytes of a buffer that is not a region's instance or partial sums (0 for those)."""
    kind = key[0]
    if kind == STAGING:
        return key[3].nbytes
    if kind == STATE:
        return key[3][1]
    return 0


def buffers_of(node, nodes=None, staged=None) -> tuple:
    """The buffers one node uses, each once: keys (kind, region name, device, copy node)
    where the copy node is set only for a staging buffer (kind STAGING); a task's saved state
    as state_key gives it. A reduce finds the
    copy behind each staged input in `staged` (per input, as its node group records it) or
    else by id in `nodes`."""
    kind = node.kind
    if kind is TASK:
        d = node.device
        out = []
        for req, targets in zip(node.requirements, node.targets):
            name = req.region.name
            if targets is None:
                out.append((INSTANCE, name, d, None))
            else:
                for t in targets:
                    out.append((PARTIAL if t.partial else INSTANCE, name, d, None))
        key = state_key(node)             # None unless it keeps or takes state
        if key is not None:
            out.append(key)
        return tuple(dict.fromkeys(out))
    name = node.region.name
    if kind is COPY:
        if node.reduction:
            return ((PARTIAL if node.from_partial else INSTANCE, name, node.src, None),
                    (STAGING, name, node.dst, node))
        return ((INSTANCE, name, node.src, None), (INSTANCE, name, node.dst, None))
    if kind is REDUCE:
        d = node.device
        out = [(INSTANCE, name, d, None)]
        for j, inp in enumerate(node.inputs):
            if inp.source == "staged":
                out.append((STAGING, name, d,
                            staged[j] if staged is not None else nodes[inp.copy_id]))
            else:
                out.append((PARTIAL if inp.source == "partial" else INSTANCE, name, d, None))
        return tuple(dict.fromkeys(out))
    out = []                                            # all-reduce
    for d, partial in zip(node.devices, node.in_partial or (False,) * len(node.devices)):
        out.append((PARTIAL if partial else INSTANCE, name, d, None))
        out.append((INSTANCE, name, d, None))
    return tuple(dict.fromkeys(out))


def written_by(node) -> tuple:
    """The buffer keys (as buffers_of gives them) a node writes: a task's WD/RW/Red+
    targets, a copy's destination, a reduce's output, an all-reduce's outputs and (it may
    sum in place) its partial inputs."""
    kind = node.kind
    if kind is TASK:
        d, out = node.device, []
        for req, targets in zip(node.requirements, node.targets):
            if req.privilege is _READ:
                continue
            if targets is None:
                out.append((INSTANCE, req.region.name, d, None))
            else:
                for t in targets:
                    out.append((PARTIAL if t.partial else INSTANCE, req.region.name, d, None))
        return tuple(out)
    if kind is COPY:
        return buffers_of(node)[1:]
    if kind is REDUCE:
        return ((INSTANCE, node.region.name, node.device, None),)
    return buffers_of(node)


def alias_sources(graph) -> dict[int, dict[int, tuple[int, ...]]]:
    """Where a task may make a buffer it writes a view of a buffer it reads, instead of
    copying (a reshape, split or contiguous transpose part, an add's backward passing its
    output gradient on): per task node id, per index of a writing requirement, the indices
    of its reading requirements (R, RW) whose buffer the written one may alias.

    The rule (docs/design.md, "Views instead of copies"): task T may store, as the whole of
    buffer B, a view of buffer A that it reads, when
      - T is the only node of the iteration that writes B (no earlier part, no later Red+
        accumulation, RW task, copy or reduce into it),
      - no node after T (in id order) writes A: every writer of A that T's read overlaps is
        a predecessor of T, and nothing writes A again while B may still be read,
      - neither region is initial data (written from outside between runs), and A is not B.
    Then the shared memory is written by nothing from T on, so every reader of B (after T)
    and of A sees what a copy would have held, in any order the executors run ready nodes.
    The storage must also outlive both: the executors' free lists do not take back memory
    another buffer views (taskrt.executor.instances: Buffer.alias, `lent`)."""
    writers: dict = {}
    for node in graph.nodes:
        for key in written_by(node):
            lst = writers.setdefault(key, [])
            if not lst or lst[-1] != node.id:
                lst.append(node.id)
    initial = graph.initial_valid
    out: dict[int, dict[int, tuple[int, ...]]] = {}
    for node in graph.nodes:
        if node.kind is not TASK:
            continue
        i, d = node.id, node.device
        reads = [(k, (INSTANCE, req.region.name, d, None))
                 for k, req in enumerate(node.requirements)
                 if req.privilege in _READS and req.region.name not in initial]
        if not reads:
            continue
        reads = [(k, a) for k, a in reads if writers.get(a, [-1])[-1] <= i]
        for j, (req, targets) in enumerate(zip(node.requirements, node.targets)):
            if req.privilege is _READ or req.region.name in initial:
                continue
            if targets is None:
                b = (INSTANCE, req.region.name, d, None)
            elif len(targets) == 1 and not targets[0].accumulate:
                b = (PARTIAL if targets[0].partial else INSTANCE, req.region.name, d, None)
            else:
                continue
            if writers.get(b) != [i]:
                continue
            ok = tuple(k for k, a in reads if a != b)
            if ok:
                out.setdefault(i, {})[j] = ok
    return out


def buffer_bytes(graph, key) -> int:
    kind, name, dev, copy = key
    if kind == STAGING or kind == STATE:
        return own_bytes(key)
    rects = graph.instance_rects if kind == INSTANCE else graph.partial_rects
    return graph.regions[name].nbytes(rects[name, dev])


def task_reads_writes(node) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Names of the regions a task reads (R, RW) and writes (WD, RW, Red+)."""
    reads, writes = [], []
    for req in node.requirements:
        if req.privilege in _READS:
            reads.append(req.region.name)
        if req.privilege is not _READ:
            writes.append(req.region.name)
    return tuple(reads), tuple(writes)
