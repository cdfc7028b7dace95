"""CPU memory between iterations: keep freed blocks in the process (glibc malloc settings).

PyTorch's CPU tensors come from malloc. By default glibc serves large blocks with mmap and
hands freed memory at the top of its heap back to the system, so a training loop, which
frees and allocates the same activations every iteration, takes page faults to get the same
memory back each time. Measured on the benchmark CNN with large layers (bench
runtime_overhead): 5300 minor page faults per iteration under this runtime, 2000 for the
same model in eager PyTorch, and none for either after retain_freed_memory() (our iteration
about 10% faster; eager PyTorch in the same process gains too).

retain_freed_memory(keep) runs once per process, when an executor gets a CPU device: every
block comes from the heap (M_MMAP_MAX 0) and up to `keep` bytes of free memory stay in the
process (M_TRIM_THRESHOLD); the executor passes Settings.cpu_retain_bytes
(TASKRT_CPU_RETAIN_BYTES, default 1 GiB; 0 leaves malloc as it is). Nothing changes where the C library is not glibc.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import platform

from ..settings import Settings

_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4          # glibc's mallopt parameters
_done = False


def retain_freed_memory(keep: int | None = None) -> bool:
    """Apply the settings above once (keep: bytes; None: the resolved settings'); whether
    malloc's settings were changed."""
    global _done
    if _done:
        return False
    _done = True
    if keep is None:
        keep = Settings.resolve().cpu_retain_bytes
    if keep <= 0 or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    keep = min(int(keep), 2 ** 31 - 1)            # mallopt takes a C int
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, keep))
