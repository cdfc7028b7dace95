"""Typed errors of the operator layer (all subclass taskrt's TaskrtError).

Operators and configs raise ShapeError, ConfigError and OperatorError; the importer raises
UnsupportedModelError (parallel_ops.importer re-exports it) and checkpoints raise
CheckpointError (parallel_ops.checkpoint re-exports it).
"""
from taskrt.errors import TaskrtError


class ShapeError(TaskrtError, ValueError):
    """An operator was built on inputs whose shapes do not fit it."""


class ConfigError(TaskrtError, ValueError):
    """A ParallelConfig does not fit its operator or the machine."""


class OperatorError(TaskrtError, TypeError):
    """An operator declaration is inconsistent (labels, dims, weights)."""


class UnsupportedModelError(TaskrtError, ValueError):
    """The module uses operations that have no parallel operator (all are listed)."""


class CheckpointError(TaskrtError, ValueError):
    """A checkpoint is missing, truncated, corrupted, or does not fit the model."""
