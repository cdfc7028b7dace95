"""2-d pooling of NCHW tensors: max, average and adaptive average (no weights).

Dims of every pooling op: n (sample), c (attribute: channels), h, w (attribute: output
height and width). A part reads the input rows and columns its output windows cover
(halos); padding applies only at the global borders, so part() gives each part its own
padding, done by the pooling's own symmetric padding where that computes the same windows
(nchw.split_padding), else explicitly: with -inf for max pooling, with zeros for average
pooling, whose divisor is then set per output element exactly as PyTorch's
count_include_pad defines it (the whole window, or only its positions inside the input).
Adaptive average pooling takes its windows from global indices (rows
floor(i*H/oh) .. ceil((i+1)*H/oh)), so a part reads exactly the rows its outputs need.
"""
from __future__ import annotations

import math

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from taskrt.geometry import Rect

from .errors import ShapeError
from .model import Model, builder
from .nchw import check_nchw, halo, out_size, pair, split_padding
from .op import PartWork, ATTRIBUTE, SAMPLE, Dim, Op, PartSpec
from .tensor import Tensor


def _dims(x: Tensor, oh: int, ow: int) -> tuple[Dim, ...]:
    n, c = x.shape[:2]
    return (Dim("n", SAMPLE, n), Dim("c", ATTRIBUTE, c), Dim("h", ATTRIBUTE, oh),
            Dim("w", ATTRIBUTE, ow))


@dataclass(frozen=True)
class PoolPart:
    """Per-part facts forward needs (kept in PartSpec.info)."""
    pad: tuple[int, int, int, int]          # F.pad order: left, right, top, bottom
    padding: tuple[int, int]                # what the pooling pads of it (rows, cols) ...
    explicit: tuple[int, int, int, int]     # ... and what forward pads (F.pad order)
    counts: tuple | None = None             # (per output row, per output col) positions
    #                                         inside the input, when they set the divisor


class _WindowPool(Op):
    """Max and average pooling: a fixed window sliding with a stride over padded input."""

    def __init__(self, model: Model, x: Tensor, kernel_size, stride, padding, name):
        super().__init__(model.unique_name(self.type, name))
        where = f"{self.type} '{self.name}'"
        check_nchw(where, x)
        k = pair(where, "kernel_size", kernel_size, 1)
        s = k if stride is None else pair(where, "stride", stride, 1)
        p = pair(where, "padding", padding, 0)
        if p[0] > k[0] // 2 or p[1] > k[1] // 2:
            raise ShapeError(f"{where}: padding {p} exceeds half the kernel {k}; PyTorch "
                             f"allows at most {(k[0] // 2, k[1] // 2)}. Use padding <= "
                             "kernel_size // 2.")
        h, w = x.shape[2:]
        oh, ow = out_size(h, k[0], s[0], p[0]), out_size(w, k[1], s[1], p[1])
        if oh < 1 or ow < 1:
            raise ShapeError(f"{where}: kernel {k} with padding {p} does not fit input "
                             f"'{x.name}' of spatial size {(h, w)} (output size {(oh, ow)}). "
                             "Use a smaller kernel or more padding.")
        self.params = {"kernel_size": k, "stride": s, "padding": p}
        self.inputs = [x]
        model.new_tensor(self, (*x.shape[:2], oh, ow))
        self.dims = _dims(x, oh, ow)
        self.labels = None           # halos: part() gives every rect

    def part(self, degrees, color) -> PartSpec:
        """Rects of one part: the output block and the input rows and columns it covers."""
        rg = self.ranges(degrees, color)
        (n0, n1), (c0, c1), (h0, h1), (w0, w1) = (rg[d.name] for d in self.dims)
        (kh, kw), (sh, sw), (ph, pw) = (self.params[k] for k in ("kernel_size", "stride",
                                                                  "padding"))
        h, w = self.inputs[0].shape[2:]
        r0, r1, top, bottom = halo(h0, h1, h, kh, sh, ph)
        q0, q1, left, right = halo(w0, w1, w, kw, sw, pw)
        pad = (left, right, top, bottom)
        info = PoolPart(pad, *split_padding(pad, (r1 - r0, q1 - q0), (h1 - h0, w1 - w0),
                                            (kh, kw), (sh, sw)), self._counts(h0, h1, w0, w1))
        return PartSpec((Rect((n0, c0, r0, q0), (n1, c1, r1, q1)),), (),
                        (Rect((n0, c0, h0, w0), (n1, c1, h1, w1)),), False, info)

    def _counts(self, h0, h1, w0, w1):
        """Divisors of a part's outputs when they are not the whole window (avg pooling)."""
        return None


def _padded_bytes(op, spec) -> int:
    """Bytes of a window pooling part's input after its explicit pad (0 without one)."""
    info = spec.info
    if not any(info.explicit):
        return 0
    left, right, top, bottom = info.explicit
    n, c, h, w = spec.inputs[0].shape
    itemsize = getattr(torch, op.inputs[0].dtype).itemsize
    return n * c * (h + top + bottom) * (w + left + right) * itemsize


class MaxPool2d(_WindowPool):
    type = "max_pool2d"

    def work(self, phase, spec, plan):
        """An explicit pad, the pooling kernel (or its backward, and the pad's)."""
        return PartWork(0, 1 + any(spec.info.explicit))

    def saved_state_bytes(self, spec, input_grads, weight_grads):
        """Autograd's: with the input's gradient wanted, the pooling's indices (int64, one
        per output) and its input when padded here (not a region)."""
        if spec.inputs[0].empty or not input_grads[0]:
            return None if spec.inputs[0].empty else 0
        return math.prod(spec.outputs[0].shape) * 8 + _padded_bytes(self, spec)

    def forward(self, spec, inputs, weights):
        x, info = inputs[0], spec.info
        if any(info.explicit):
            x = F.pad(x, info.explicit, value=float("-inf"))
        return [F.max_pool2d(x, self.params["kernel_size"], self.params["stride"],
                             info.padding)]

    def reference(self, inputs, weights):
        pr = self.params
        return [F.max_pool2d(inputs[0], pr["kernel_size"], pr["stride"], pr["padding"])]


class AvgPool2d(_WindowPool):
    type = "avg_pool2d"

    def __init__(self, model: Model, x: Tensor, kernel_size, stride, padding,
                 count_include_pad: bool, name):
        super().__init__(model, x, kernel_size, stride, padding, name)
        self.params["count_include_pad"] = bool(count_include_pad)

    def _counts(self, h0, h1, w0, w1):
        if self.params["count_include_pad"]:
            return None              # PyTorch divides by the whole window (floor mode)
        (kh, kw), (sh, sw), (ph, pw) = (self.params[k] for k in ("kernel_size", "stride",
                                                                  "padding"))
        h, w = self.inputs[0].shape[2:]

        def inside(i, k, s, p, size):
            return min(i * s - p + k, size) - max(i * s - p, 0)
        return (tuple(inside(i, kh, sh, ph, h) for i in range(h0, h1)),
                tuple(inside(j, kw, sw, pw, w) for j in range(w0, w1)))

    def saved_state_bytes(self, spec, input_grads, weight_grads):
        """Autograd's, for parts divided by the whole window: its input when padded here
        (not a region), with the input's gradient wanted; other parts are measured."""
        if spec.inputs[0].empty or spec.info.counts is not None:
            return None
        return _padded_bytes(self, spec) if input_grads[0] else 0

    def work(self, phase, spec, plan):
        """As max_pool2d's for parts divided by the whole window; parts with their own
        divisors (count_include_pad=False at a border) are counted."""
        if spec.info.counts is not None:
            return None
        return PartWork(0, 1 + any(spec.info.explicit))

    def forward(self, spec, inputs, weights):
        x = inputs[0]
        info: PoolPart = spec.info
        if any(info.explicit):
            x = F.pad(x, info.explicit)
        k, s = self.params["kernel_size"], self.params["stride"]
        if info.counts is None:          # the whole window (zero padding included)
            return [F.avg_pool2d(x, k, s, info.padding, count_include_pad=True)]
        rows, cols = (torch.tensor(c, dtype=x.dtype, device=x.device) for c in info.counts)
        return [F.avg_pool2d(x, k, s, info.padding, divisor_override=1)
                / (rows[:, None] * cols[None, :])]

    def reference(self, inputs, weights):
        pr = self.params
        return [F.avg_pool2d(inputs[0], pr["kernel_size"], pr["stride"], pr["padding"],
                             count_include_pad=pr["count_include_pad"])]


@dataclass(frozen=True)
class AdaptivePart:
    """Per-part facts forward needs: each output's window relative to the part's first
    input row and column, the kernel when all windows are equal and disjoint, and whether
    the part has every output row and column (then it is adaptive pooling of its input:
    PyTorch's kernel, a mean for output size 1, whose backward scatters nothing)."""
    rows: tuple
    cols: tuple
    kernel: tuple | None
    whole: bool = False


def _window(i: int, size: int, out: int) -> tuple[int, int]:
    """Input range [start, end) of adaptive pooling's output index i."""
    return (i * size) // out, -((-(i + 1) * size) // out)


class AdaptiveAvgPool2d(Op):
    type = "adaptive_avg_pool2d"

    def __init__(self, model: Model, x: Tensor, output_size, name):
        super().__init__(model.unique_name(self.type, name))
        where = f"{self.type} '{self.name}'"
        check_nchw(where, x)
        h, w = x.shape[2:]
        if isinstance(output_size, (tuple, list)) and len(output_size) == 2:
            output_size = tuple(s if s is not None else full
                                for s, full in zip(output_size, (h, w)))
        oh, ow = pair(where, "output_size", output_size, 1)
        self.params = {"output_size": (oh, ow)}
        self.inputs = [x]
        model.new_tensor(self, (*x.shape[:2], oh, ow))
        self.dims = _dims(x, oh, ow)
        self.labels = None           # windows from global indices: part() gives every rect

    def part(self, degrees, color) -> PartSpec:
        """Rects of one part: the output block and the input rows and columns its windows
        cover."""
        rg = self.ranges(degrees, color)
        (n0, n1), (c0, c1), (h0, h1), (w0, w1) = (rg[d.name] for d in self.dims)
        h, w = self.inputs[0].shape[2:]
        oh, ow = self.params["output_size"]
        rows = [_window(i, h, oh) for i in range(h0, h1)]
        cols = [_window(j, w, ow) for j in range(w0, w1)]
        r0, q0 = rows[0][0], cols[0][0]
        kernel = (h // oh, w // ow) if h % oh == 0 and w % ow == 0 else None
        info = AdaptivePart(tuple((a - r0, b - r0) for a, b in rows),
                            tuple((a - q0, b - q0) for a, b in cols), kernel,
                            (h1 - h0, w1 - w0) == (oh, ow))
        return PartSpec((Rect((n0, c0, r0, q0), (n1, c1, rows[-1][1], cols[-1][1])),), (),
                        (Rect((n0, c0, h0, w0), (n1, c1, h1, w1)),), False, info)

    def forward(self, spec, inputs, weights):
        x = inputs[0]
        info: AdaptivePart = spec.info
        if info.whole:
            return [F.adaptive_avg_pool2d(x, self.params["output_size"])]
        if info.kernel is not None:
            return [F.avg_pool2d(x, info.kernel)]
        return [_averaging(info.rows, x.shape[2], x) @ x @
                _averaging(info.cols, x.shape[3], x).T]

    def saved_state_bytes(self, spec, input_grads, weight_grads):
        """forward_saving keeps its input (a region); other parts are measured."""
        return None if spec.inputs[0].empty or not spec.info.whole else 0

    def work(self, phase, spec, plan):
        """One kernel each way (torch's adaptive pooling, a mean, or an average pool and
        their derivatives: an expanded gradient divided); the averaging matrices' path is
        counted."""
        info = spec.info
        if spec.inputs[0].empty or not (info.whole or info.kernel is not None):
            return None
        return PartWork(0, 1)

    explicit_backward = True

    def forward_saving(self, spec, inputs, weights):
        """forward() without autograd for a part with every output row and column (torch's
        kernel on the part's input), saving the input's shape for backward(); None (autograd)
        for the others."""
        x = inputs[0]
        if x is None or not spec.info.whole:
            return None
        return [F.adaptive_avg_pool2d(x, self.params["output_size"])], x

    def backward(self, spec, saved, output_grads, need_inputs, need_weights):
        """What autograd runs on F.adaptive_avg_pool2d: for output size 1 torch takes the
        mean over (h, w), whose derivative is the gradient expanded and divided by h * w;
        else its adaptive pooling kernel's backward."""
        x, dy = saved, output_grads[0]
        if not need_inputs[0]:
            return [None], []
        if self.params["output_size"] == (1, 1):
            return [dy.expand(x.shape) / (x.shape[2] * x.shape[3])], []
        return [torch.ops.aten._adaptive_avg_pool2d_backward(dy, x)], []

    def reference(self, inputs, weights):
        return [F.adaptive_avg_pool2d(inputs[0], self.params["output_size"])]


def _averaging(windows, size: int, like: torch.Tensor) -> torch.Tensor:
    """The (len(windows), size) matrix whose row i averages the positions windows[i]."""
    m = like.new_zeros(len(windows), size)
    for i, (a, b) in enumerate(windows):
        m[i, a:b] = 1.0 / (b - a)
    return m


@builder
def max_pool2d(model: Model, x: Tensor, kernel_size, stride=None, padding=0,
               name: str | None = None) -> Tensor:
    """Max pooling, like torch.nn.MaxPool2d(kernel_size, stride, padding); stride defaults
    to kernel_size."""
    return model.add_op(MaxPool2d(model, x, kernel_size, stride, padding, name)).outputs[0]


@builder
def avg_pool2d(model: Model, x: Tensor, kernel_size, stride=None, padding=0,
               count_include_pad: bool = True, name: str | None = None) -> Tensor:
    """Average pooling, like torch.nn.AvgPool2d(kernel_size, stride, padding,
    count_include_pad=count_include_pad); stride defaults to kernel_size."""
    return model.add_op(AvgPool2d(model, x, kernel_size, stride, padding, count_include_pad,
                               name)).outputs[0]


@builder
def adaptive_avg_pool2d(model: Model, x: Tensor, output_size,
                        name: str | None = None) -> Tensor:
    """Adaptive average pooling to output_size (an int, or (oh, ow) where None keeps the
    input size), like torch.nn.AdaptiveAvgPool2d(output_size); 1 is global averaging."""
    return model.add_op(AdaptiveAvgPool2d(model, x, output_size, name)).outputs[0]
