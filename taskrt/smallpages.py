"""small_pages(): run a block with numpy's advice for huge pages switched off.

numpy (1.20 on, Linux) advises the kernel to back every new array of 4 MiB or more with
transparent huge pages (madvise MADV_HUGEPAGE). Where the kernel takes the advice
(/sys/kernel/mm/transparent_hugepage/enabled "madvise", as on the machine of
docs/design.md "Simulator speed"), the first touch of such an array's memory faults in
2 MiB pages, zeroed and compacted for by the kernel. The full simulation makes and drops
arrays of millions of entries, pass after pass: GPT-3 2.7B at 1,024 GPUs under Megatron
t=8 spent ~0.7 s of system time in the memory model's first call (Liveness.on_timeline:
29.6k page faults; 0.05 s in a later call, whose pages were reused) and ~0.3 s in the
node arrays', for the same user time; with the advice off, 4 KiB pages, both were gone.
The results do not depend on it. Nesting is fine: each block restores what it found.
Where numpy has no such switch the block runs as it is.
"""
from __future__ import annotations

from contextlib import contextmanager

try:
    from numpy._core.multiarray import _set_madvise_hugepage
except ImportError:                     # numpy 1.x, or none on this platform
    try:
        from numpy.core.multiarray import _set_madvise_hugepage
    except ImportError:
        _set_madvise_hugepage = None


def huge_pages() -> bool | None:
    """Whether numpy advises huge pages for new arrays now (None: no such switch)."""
    if _set_madvise_hugepage is None:
        return None
    was = _set_madvise_hugepage(True)
    _set_madvise_hugepage(was)
    return bool(was)


@contextmanager
def small_pages():
    if _set_madvise_hugepage is None:
        yield
        return
    was = _set_madvise_hugepage(False)
    try:
        yield
    finally:
        _set_madvise_hugepage(was)
