"""Executors of a TaskGraph: in one process (local) and, later, over MPI ranks."""
from .local import LocalExecutor
from .steps import TaskContext

__all__ = ["LocalExecutor", "TaskContext"]
