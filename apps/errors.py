"""Errors of the apps layer: mistakes the user can fix from the command line.

`main` prints a UsageError's message once (rank 0) and exits with EXIT_USAGE on every rank,
without a traceback; errors of the layers below keep their own types (parallel_ops.errors).
A UsageError is a strategy.workload.WorkloadError, which the strategy tools catch.
"""
from strategy.workload import WorkloadError

EXIT_USAGE = 2


class UsageError(WorkloadError):
    """A mistake the user can fix from the command line; printed without a traceback."""
