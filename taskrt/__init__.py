"""taskrt: a Legion-style task runtime (regions, launches, planner, executors).

It knows nothing about neural networks; parallel_ops builds on it.
"""
from .errors import (ExecutionError, MappingError, PartitionError, PlanError, PrivilegeError,
                     RectError, TaskrtError)
from .geometry import Rect, bounding_box, subtract_all
from .launch import IndexLaunch
from .machine import Device, Machine
from .planner import Planner, plan
from .privilege import R, RED, RW, WD, Privilege, RegionRequirement
from .region import Region, block_bounds, block_rect
from .taskgraph import AllReduceNode, CopyNode, NodeKind, ReduceNode, TaskGraph, TaskNode
from .trace import TraceEvent, to_chrome, write_chrome
from .executor import LocalExecutor, TaskContext

__all__ = [
    "ExecutionError", "MappingError", "PartitionError", "PlanError", "PrivilegeError",
    "RectError", "TaskrtError", "Rect", "bounding_box", "subtract_all", "IndexLaunch",
    "Device", "Machine", "Planner", "plan", "R", "RED", "RW", "WD",
    "Privilege", "RegionRequirement", "Region", "block_bounds", "block_rect",
    "AllReduceNode", "CopyNode", "NodeKind", "ReduceNode", "TaskGraph", "TaskNode", "TraceEvent",
    "to_chrome", "write_chrome", "LocalExecutor", "TaskContext",
]
