"""NCHW geometry shared by conv2d, pooling and batch norm: `check_nchw` (an input has the
four axes N, C, H, W), `pair` (an int or a pair of ints, checked), `out_size` (the output
length of a sliding window) and `halo` (the input range a block of outputs reads, and the
zero padding around it). Pure functions; the operators live in conv2d.py, pool2d.py and
batchnorm.py.
"""
from __future__ import annotations

from .errors import ShapeError
from .tensor import Tensor


def check_nchw(where: str, x: Tensor) -> None:
    """Refuse an input without exactly the four axes (N, C, H, W)."""
    if x.ndim != 4:
        raise ShapeError(f"{where}: input '{x.name}' has shape {x.shape}; it needs 4 axes "
                         "(N, C, H, W). Add a batch axis or reshape the input.")


def pair(where: str, what: str, value, minimum: int) -> tuple[int, int]:
    """(a, b) from an int or a pair of ints, each at least `minimum`."""
    if isinstance(value, int) and not isinstance(value, bool):
        v = (value, value)
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        v = tuple(value)
    else:
        v = None
    if v is None or not all(isinstance(k, int) and not isinstance(k, bool) for k in v) \
            or min(v) < minimum:
        m = max(minimum, 1)
        raise ShapeError(f"{where}: {what} {value!r} is not an int or a pair of ints "
                         f">= {minimum}. Give e.g. {what}={m} or ({m}, {m}).")
    return v


def out_size(size: int, kernel: int, stride: int, padding: int, dilation: int = 1) -> int:
    """Output length of a sliding window (floor mode), as PyTorch computes it."""
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def halo(out_lo: int, out_hi: int, size: int, kernel: int, stride: int, padding: int,
         dilation: int = 1) -> tuple[int, int, int, int]:
    """Input range [lo, hi) that outputs [out_lo, out_hi) read, and the zero rows to add
    before and after it (the part of their windows in the global padding)."""
    lo_raw = out_lo * stride - padding
    hi_raw = (out_hi - 1) * stride - padding + dilation * (kernel - 1) + 1
    lo = min(max(lo_raw, 0), size)
    hi = max(min(hi_raw, size), lo)
    if hi == lo:                     # every window lies in the padding
        return lo, lo, hi_raw - lo_raw, 0
    return lo, hi, lo - lo_raw, hi_raw - hi
