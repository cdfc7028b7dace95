"""Typed errors of the operator layer (all subclass taskrt's TaskrtError)."""
from taskrt.errors import TaskrtError


class ShapeError(TaskrtError, ValueError):
    """An operator was built on inputs whose shapes do not fit it."""


class ConfigError(TaskrtError, ValueError):
    """A ParallelConfig does not fit its operator or the machine."""


class OperatorError(TaskrtError, TypeError):
    """An operator declaration is inconsistent (labels, dims, weights)."""
