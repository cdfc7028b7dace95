"""TaskGraph: the nodes of one planned sequence of launches and their true dependences.

Four kinds of node (NodeKind says what each does, which buffers it uses and where it runs):
TaskNode, CopyNode, ReduceNode, AllReduceNode.

Node ids are dense, and every edge goes from a lower id to a higher one, so id order is a
topological order. The simulator and the executors consume the same graph.
"""
from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import chain
from operator import attrgetter
from typing import Any, Iterator, NamedTuple

import numpy as np

from .bufferrects import BufferRects
from .geometry import Rect
from .privilege import RegionRequirement
from .region import Region


class NodeKind(StrEnum):
    """What a node does. Buffers are a region's instance or partial-sum buffer on a device, or
    a reduction copy's staging buffer (taskrt/liveness.py); a node's `devices` are where it
    runs, and their ranks are the ranks that take part in it (executor/scheduler.py).
    A str: traces, profiles and saved files hold the plain names ("task", ...)."""
    TASK = "task"
    """TaskNode: one point task of a launch on its `device`. Uses per requirement that
    device's instance, or for a Red+ the buffers its targets name (the partial-sum buffer
    or the instance)."""
    COPY = "copy"
    """CopyNode: move `rect` of a region from device `src` to `dst` (instance to instance).
    A reduction copy (reduction=True) moves src's partial sums (from its partial buffer, or
    its instance) into a staging buffer on dst, read by a ReduceNode. Across ranks, src's
    rank sends and dst's rank receives."""
    REDUCE = "reduce"
    """ReduceNode: on its `device`, sum partial contributions (its partial buffer, staged
    copies, the instance's previous value as base) into the instance, in a fixed order."""
    ALLREDUCE = "allreduce"
    """AllReduceNode: every device of `devices` ends with the sum of all their partials
    (each device's partial buffer or instance, into its instance); a collective of their
    ranks."""


# The members as module constants, for `node.kind is TASK` in loops over nodes (on Python
# 3.11 an enum attribute lookup costs about ten global lookups).
TASK, COPY, REDUCE, ALLREDUCE = NodeKind


class ReduceTarget(NamedTuple):
    """Where one piece of a task's Red+ contribution goes (coherence.py decides)."""
    piece: Rect
    partial: bool          # into the device's partial-sum buffer (else its instance)
    accumulate: bool       # added onto the sums already there (else stored)


@dataclass(eq=False, slots=True)
class TaskNode:
    id: int
    launch: Any                    # the IndexLaunch
    color: tuple[int, ...]
    device: int
    requirements: tuple[RegionRequirement, ...]
    # Per requirement: for a Red+, where its contribution goes, piece by piece; else None.
    targets: tuple[tuple[ReduceTarget, ...] | None, ...]
    kind = TASK

    @property
    def owner(self) -> str:
        return self.launch.name

    @property
    def devices(self) -> tuple[int, ...]:
        return (self.device,)

    @property
    def cost_key(self) -> tuple:
        """What the cost model needs: the launch's tag, and per requirement its privilege,
        part shape and dtype; for a Red+ also how its contribution is stored (per piece:
        added onto sums already there, or stored), which changes the work done."""
        out = []
        for r, t in zip(self.requirements, self.targets):
            if t is None:
                out.append((r.privilege.code, r.rect.shape, r.region.dtype))
            else:
                out.append((r.privilege.code, r.rect.shape, r.region.dtype,
                            tuple([target.accumulate for target in t])))
        return (self.launch.cost_tag, tuple(out))

    def describe(self) -> str:
        reqs = " + ".join(str(r) for r in self.requirements)
        return f"task {self.launch.name}{list(self.color)}@{self.device}: {reqs}"


@dataclass(eq=False, slots=True)
class CopyNode:
    id: int
    owner: str                     # launch whose requirement caused the copy
    region: Region
    rect: Rect
    src: int
    dst: int
    reduction: bool = False
    from_partial: bool = False     # a reduction copy's source: src's partial buffer
    where: tuple | None = None     # (node group id, index): taskrt/nodegroups.py
    kind = COPY

    @property
    def nbytes(self) -> int:
        return self.region.nbytes(self.rect)

    @property
    def devices(self) -> tuple[int, ...]:
        return (self.src, self.dst)

    def describe(self) -> str:
        what = "redcopy" if self.reduction else "copy"
        return f"{what} {self.region.name}{self.rect} {self.src}->{self.dst} ({self.nbytes} B)"


# Not frozen (treat it as immutable): a frozen dataclass sets each field by
# object.__setattr__, and graph_of remakes every staged input with its copy's id (1.1M of
# GPT-3 2.7B at 1,024 GPUs under Megatron t=8: 0.53 -> 0.28 s). Equality and hash by value
# as before (unsafe_hash: the fields' tuple, as frozen's).
@dataclass(unsafe_hash=True, slots=True)
class ReduceInput:
    source: str                    # "partial" (local partial buffer), "staged", "instance"
    #                                (the local instance: the base, or sums held there)
    rect: Rect
    copy_id: int = -1              # the CopyNode whose staging buffer holds it ("staged")


@dataclass(eq=False, slots=True)
class ReduceNode:
    id: int
    owner: str
    region: Region
    rect: Rect
    device: int
    inputs: tuple[ReduceInput, ...]
    where: tuple | None = None     # (node group id, index): taskrt/nodegroups.py
    kind = REDUCE

    @property
    def nbytes(self) -> int:
        return self.region.nbytes(self.rect)

    @property
    def devices(self) -> tuple[int, ...]:
        return (self.device,)

    def describe(self) -> str:
        ins = ", ".join(f"{i.source}{i.rect}" for i in self.inputs)
        return f"reduce {self.region.name}{self.rect}@{self.device} <- {ins}"


@dataclass(eq=False, slots=True)
class AllReduceNode:
    id: int
    owner: str
    region: Region
    rect: Rect
    devices: tuple[int, ...]
    in_partial: tuple[bool, ...] = ()   # per device: its sums are in the partial buffer
    where: tuple | None = None     # (node group id, index): taskrt/nodegroups.py
    kind = ALLREDUCE

    @property
    def nbytes(self) -> int:
        return self.region.nbytes(self.rect)

    def describe(self) -> str:
        return f"allreduce {self.region.name}{self.rect} over {list(self.devices)}"


Node = TaskNode | CopyNode | ReduceNode | AllReduceNode


@dataclass
class TaskGraph:
    """`preds[i]` / `succs[i]`: node i's predecessor / successor ids, ascending. A planned
    graph holds them as arrays (`pred_csr()`, what the simulator reads) and makes the lists
    on first use (executors, traces, tests): 1M nodes' lists are ~0.6 s of Python."""
    machine: Any
    nodes: list = field(default_factory=list)
    launch_nodes: dict[str, list[int]] = field(default_factory=dict)
    regions: dict[str, Region] = field(default_factory=dict)
    # Bounding rect of the instance (and of the partial-sum buffer) per (region name, device),
    # kept per region (bufferrects.py).
    instance_rects: BufferRects = field(default_factory=BufferRects)
    partial_rects: BufferRects = field(default_factory=BufferRects)
    # Where valid data lives before the first node runs / after the last, per region name.
    initial_valid: dict[str, list[tuple[Rect, tuple[int, ...]]]] = field(default_factory=dict)
    final_valid: dict[str, list[tuple[Rect, tuple[int, ...]]]] = field(default_factory=dict)
    # Partial sums never reduced by a read: (rect, device, in partial buffer?) per region.
    final_pending: dict[str, list[tuple[Rect, int, bool]]] = field(default_factory=dict)
    # The nodes that are not tasks as othercolumns.OtherColumns, where the planner made them
    # (a one-shot plan: groupcolumns.py); None otherwise, and once a node is added.
    other_columns: Any = field(default=None, compare=False, repr=False)
    # Per node its kind's code (taskclasses.KIND_CODE), int8, where the planner made them
    # with other_columns (TaskClasses.of and count() take them instead of asking 2.6M
    # nodes); None otherwise, and once a node is added.
    node_kinds: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        self._preds: list[list[int]] | None = []
        self._succs: list[list[int]] | None = []
        self._csr: tuple[np.ndarray, np.ndarray] | None = None

    def set_edges(self, pred_ptr: np.ndarray, pred_ids: np.ndarray) -> None:
        """The graph's edges as CSR arrays: node i's predecessors are
        pred_ids[pred_ptr[i]:pred_ptr[i + 1]], ascending, each once."""
        self._csr = (pred_ptr, pred_ids)
        self._preds = self._succs = None

    def pred_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """(pred_ptr, pred_ids) as set_edges takes them."""
        if self._csr is None:
            counts = np.fromiter(map(len, self._preds), dtype=np.int64, count=len(self._preds))
            ptr = np.zeros(len(counts) + 1, dtype=np.int64)
            np.cumsum(counts, out=ptr[1:])
            self._csr = (ptr, np.fromiter(chain.from_iterable(self._preds), dtype=np.int64,
                                          count=int(ptr[-1])))
        return self._csr

    @property
    def preds(self) -> list[list[int]]:
        if self._preds is None:
            ptr, flat = self._csr[0].tolist(), self._csr[1].tolist()
            self._preds = [flat[ptr[i]:ptr[i + 1]] for i in range(len(ptr) - 1)]
        return self._preds

    @property
    def succs(self) -> list[list[int]]:
        if self._succs is None:
            preds = self.preds
            succs = self._succs = [[] for _ in range(len(preds))]
            for i, ps in enumerate(preds):
                for p in ps:
                    succs[p].append(i)
        return self._succs

    def with_preds(self, preds: list[list[int]]) -> "TaskGraph":
        """A copy sharing everything but the edges: node i's predecessors are preds[i]
        (each ascending; successors follow from them)."""
        g = dataclasses.replace(self)
        g._preds, g._succs, g._csr = preds, None, None
        return g

    def add(self, node, preds) -> None:
        assert node.id == len(self.nodes)
        all_preds, all_succs = self.preds, self.succs
        self._csr = None
        self.other_columns = self.node_kinds = None
        self.nodes.append(node)
        ps = sorted(p for p in set(preds) if p is not None and p != node.id)
        all_preds.append(ps)
        all_succs.append([])
        for p in ps:
            all_succs[p].append(node.id)
        self.launch_nodes.setdefault(node.owner, []).append(node.id)

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator:
        return iter(self.nodes)

    @property
    def num_edges(self) -> int:
        return int(self.pred_csr()[0][-1])

    def tasks(self) -> list[TaskNode]:
        return [n for n in self.nodes if n.kind is TASK]

    def copies(self) -> list[CopyNode]:
        return [n for n in self.nodes if n.kind is COPY]

    def count(self) -> dict[str, int]:
        """Nodes per kind, keyed by the kinds' names."""
        out = dict.fromkeys(map(str, NodeKind), 0)
        kinds = self.node_kinds
        if kinds is not None and len(kinds) == len(self.nodes):
            # (a code is its kind's position in NodeKind: taskclasses.KIND_CODE)
            counts = np.bincount(kinds, minlength=len(NodeKind)).tolist()
            for kind, k in zip(NodeKind, counts):
                out[kind] += k
            return out
        for kind, k in Counter(map(attrgetter("kind"), self.nodes)).items():
            out[kind] += k
        return out

    def bytes_moved(self) -> int:
        """Bytes crossing devices: copies plus (n-1)/n ring traffic per all-reduce member."""
        total = 0
        for n in self.nodes:
            if n.kind is COPY:
                total += n.nbytes
            elif n.kind is ALLREDUCE:
                k = len(n.devices)
                total += 2 * (k - 1) * n.nbytes
        return total

    def fingerprint(self) -> str:
        """A hash of every node and edge that is identical in every process building this graph."""
        h = hashlib.blake2b(digest_size=16)
        for n, ps in zip(self.nodes, self.preds):
            h.update(n.describe().encode())
            h.update(repr(ps).encode())
        return h.hexdigest()

    def summary(self) -> str:
        c = self.count()
        return (f"TaskGraph: {c['task']} tasks, {c['copy']} copies, {c['reduce']} reduces, "
                f"{c['allreduce']} all-reduces, {self.num_edges} edges, "
                f"{self.bytes_moved()} bytes moved")

    def dump(self) -> str:
        lines = []
        for n, ps in zip(self.nodes, self.preds):
            lines.append(f"{n.id:5d} {n.describe()}  <- {ps}")
        return "\n".join(lines)
