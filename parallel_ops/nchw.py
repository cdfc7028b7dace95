"""NCHW geometry shared by conv2d, pooling and batch norm: `check_nchw` (an input has the
four axes N, C, H, W), `pair` (an int or a pair of ints, checked), `out_size` (the output
length of a sliding window), `halo` (the input range a block of outputs reads, and the
zero padding around it) and `split_padding` (which of a part's padding the operator's own
symmetric padding can do). Pure functions; the operators live in conv2d.py, pool2d.py and
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


def split_padding(pad: tuple[int, int, int, int], size: tuple[int, int],
                  out: tuple[int, int], kernel, stride, dilation=(1, 1)):
    """A part's border padding `pad` (F.pad order: left, right, top, bottom) for input of
    spatial `size` and `out` outputs, split into the symmetric padding the window operator
    applies itself (per axis: (rows, cols)) and what must still be padded explicitly (F.pad
    order). Per axis the operator's padding does it when its windows are the part's: they
    start at the same leading padding, so they are when there are as many (equal sides, or
    a larger leading side whose extra trailing rows hold no window, as when a stride-2
    window ends before the bottom padding). Then no padded copy of the input is made, and
    autograd has no padding to undo."""
    implicit, explicit = [], []
    for lead, trail, n, o, k, s, d in zip(pad[2::-2], pad[3::-2], size, out, kernel,
                                          stride, dilation):
        if n > 0 and out_size(n, k, s, lead, d) == o:
            implicit.append(lead)
            explicit.append((0, 0))
        else:
            implicit.append(0)
            explicit.append((lead, trail))
    (t, b), (lft, r) = explicit
    return tuple(implicit), (lft, r, t, b)
