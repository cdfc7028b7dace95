"""Errors of the apps layer: mistakes the user can fix from the command line.

`main` prints a UsageError's message once (rank 0) and exits with EXIT_USAGE on every rank,
without a traceback; errors of the layers below keep their own types (parallel_ops.errors).
"""

EXIT_USAGE = 2


class UsageError(Exception):
    """A mistake the user can fix from the command line; printed without a traceback."""
