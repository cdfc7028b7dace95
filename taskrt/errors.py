"""Typed errors of the task runtime.

Every message reads "where: what (values). how to fix". Callers that know more context
(the operator, the rank, the file) catch these and re-raise with it added.
"""


class TaskrtError(Exception):
    """Base class of every error the runtime raises on purpose."""


class RectError(TaskrtError, ValueError):
    """A rectangle is malformed or used with one of another dimensionality."""


class PartitionError(TaskrtError, ValueError):
    """A partition cannot be built as asked (degrees, parts outside the region)."""


class PrivilegeError(TaskrtError, ValueError):
    """Region requirements conflict, e.g. two points of one launch write the same element."""


class MappingError(TaskrtError, ValueError):
    """A point task is placed on a device that does not exist or cannot run it."""


class PlanError(TaskrtError, ValueError):
    """The planner cannot produce a TaskGraph, e.g. a task reads data nobody wrote."""


class ExecutionError(TaskrtError, RuntimeError):
    """A node of a TaskGraph failed while it ran; names the node, its device and the cause."""
