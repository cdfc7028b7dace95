"""TaskClasses: a graph's point tasks grouped by everything that decides their cost key,
their buffers (but for the device) and the regions they read and write.

Those are functions of a task's launch and, per requirement, the region's name, the
privilege and the part's shape, plus, for a Red+, where each piece of its contribution goes
(partial-sum buffer or instance, added onto sums or stored): TaskNode.cost_key,
liveness.buffers_of, liveness.task_reads_writes. Tasks equal in all of those form a class.
Whole-graph passes over a large graph (the simulator's timing, the memory model) ask those
per-node functions once per class, of its first task (`first`), and per task only find its
class: a few C-level calls per node, not a tuple and a dict lookup per requirement. (GPT-3
2.7B's shape data parallel on 128 GPUs: 125,569 tasks in a few hundred classes.)

Saved state (liveness.state_key) depends on the task's color too: it is not part of the
class; the memory model asks it per task of a launch that keeps or takes state.
"""
from __future__ import annotations

from operator import attrgetter, itemgetter

import numpy as np

from .taskgraph import TASK

# Per requirement: what decides its part of the class (names and codes hash in C; a
# Region's or Privilege's hash is Python code).
_SIGNATURE = attrgetter("region.name", "privilege.code", "rect.shape")
# Per Red+ target piece: (partial, accumulate) of ReduceTarget(piece, partial, accumulate).
_FLAGS = itemgetter(1, 2)


def class_key(node) -> tuple:
    """What decides a point task's class: (launch, per requirement (region name, privilege
    code, part shape), per requirement None or its Red+ targets' (partial, accumulate))."""
    targets = node.targets
    if targets.count(None) == len(targets):
        pattern = None
    else:
        pattern = tuple([None if t is None else tuple(map(_FLAGS, t)) for t in targets])
    return (node.launch, tuple(map(_SIGNATURE, node.requirements)), pattern)


class TaskClasses:
    """ids: the graph's task node ids, ascending; cls: per task, its class; device: per
    task, its device; first: per class, its first task node; others: the ids of the nodes
    that are not tasks, ascending."""
    __slots__ = ("ids", "cls", "device", "first", "others")

    def __init__(self, ids, cls, device, first, others):
        self.ids, self.cls, self.device, self.first, self.others = ids, cls, device, first, others

    @classmethod
    def of(cls, nodes) -> "TaskClasses":
        """The classes of `nodes` (a graph's nodes, node i at index i)."""
        classes: dict = {}
        first: list = []
        ids: list[int] = []
        of: list[int] = []
        devices: list[int] = []
        others: list[int] = []
        get = classes.get
        for node in nodes:
            if node.kind is not TASK:
                others.append(node.id)
                continue
            key = class_key(node)
            c = get(key)
            if c is None:
                c = classes[key] = len(first)
                first.append(node)
            ids.append(node.id)
            of.append(c)
            devices.append(node.device)
        i8 = np.int64
        return cls(np.array(ids, dtype=i8), np.array(of, dtype=i8),
                   np.array(devices, dtype=i8), first, np.array(others, dtype=i8))

    def __len__(self) -> int:
        return len(self.first)
