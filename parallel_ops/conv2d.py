"""conv2d: 2-d convolution of NCHW tensors with zero padding, equal to torch.nn.Conv2d.

Dims: n (sample), c (parameter: output channels; splits the weight's rows and the bias),
h, w (attribute: output height and width), ci (reduction: input channels within a group,
the weight's second axis; parts produce partial sums and only the ci=0 part adds the bias).

A part reads the input rows and columns its output rows and columns need (halos), and
padding applies only at the global borders: part() puts each part's own padding in
spec.info, with the share F.conv2d's symmetric padding can do (nchw.split_padding); forward
pads the rest explicitly. With
groups > 1 every split stays exact: a part whose output channels span several groups
reads, for each spanned group, that group's input channels in its ci range, and runs one
grouped convolution over the spanned groups with its weight rows padded by zeros to whole
groups (at most one partial group at each end).

The window geometry it shares with pooling (`pair`, `out_size`, `halo`) is in nchw.py.
`activation` (e.g. "relu") is applied by each part to its output (parallel_ops.activation);
it keeps ci whole.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from taskrt.geometry import Rect

from .activation import (FusesActivation, activate, activate_saving, activated,
                         activation_backward, check_activation)
from .errors import ShapeError
from .model import Model, builder
from .nchw import check_nchw, halo, out_size, pair, split_padding
from . import workshape
from .op import ATTRIBUTE, PARAMETER, REDUCTION, SAMPLE, Dim, Op, PartSpec, PartWork
from .workshape import activation_backward_kernels, activation_kernels
from .tensor import Tensor


# The overload's own operator: the same kernel, without the overload packet's resolution
# nor OpOverload.__call__'s Python frame per call.
_convolution_backward = getattr(torch.ops.aten.convolution_backward.default, "_op",
                                torch.ops.aten.convolution_backward.default)


@dataclass(frozen=True)
class ConvPart:
    """Per-part facts forward needs (kept in PartSpec.info)."""
    pad: tuple[int, int, int, int]   # F.pad order: left, right, top, bottom
    padding: tuple[int, int]         # what F.conv2d pads of it (rows, cols) ...
    explicit: tuple[int, int, int, int]  # ... and what forward pads (F.pad order)
    span: int                        # groups the part's output channels touch
    front: int                       # zero weight rows before the part's rows (span > 1)
    back: int                        # zero weight rows after them
    group_in: int                    # input channels per group when the part must pick
    #                                  its ci range out of each spanned group, else 0


class Conv2d(FusesActivation, Op):
    type = "conv2d"

    def __init__(self, model: Model, x: Tensor, out_channels: int, kernel_size, stride=1,
                 padding=0, dilation=1, groups: int = 1, bias: bool = True,
                 name: str | None = None, activation: str | None = None):
        super().__init__(model.unique_name("conv2d", name))
        where = f"conv2d '{self.name}'"
        check_nchw(where, x)
        check_activation(where, activation)     # before the model gets its weights
        n, cin, h, w = x.shape
        k = pair(where, "kernel_size", kernel_size, 1)
        s = pair(where, "stride", stride, 1)
        p = pair(where, "padding", padding, 0)
        d = pair(where, "dilation", dilation, 1)
        if not isinstance(out_channels, int) or out_channels < 1:
            raise ShapeError(f"{where}: out_channels {out_channels!r} must be a positive int.")
        if not isinstance(groups, int) or groups < 1 or cin % groups or out_channels % groups:
            raise ShapeError(f"{where}: groups {groups!r} must divide both the input channels "
                             f"({cin}) and out_channels ({out_channels}). Use a common "
                             f"divisor such as {math.gcd(cin, out_channels)} or 1.")
        oh, ow = (out_size(h, k[0], s[0], p[0], d[0]), out_size(w, k[1], s[1], p[1], d[1]))
        if oh < 1 or ow < 1:
            raise ShapeError(f"{where}: kernel {k} with dilation {d} and padding {p} does not "
                             f"fit input '{x.name}' of spatial size {(h, w)} (output size "
                             f"{(oh, ow)}). Use a smaller kernel or dilation, or more padding.")
        self.params = {"in_channels": cin, "out_channels": out_channels, "kernel_size": k,
                       "stride": s, "padding": p, "dilation": d, "groups": groups,
                       "bias": bias}
        self.inputs = [x]
        model.new_weight(self, "weight", (out_channels, cin // groups, *k))
        if bias:
            model.new_weight(self, "bias", (out_channels,))
        model.new_tensor(self, (n, out_channels, oh, ow))
        self.dims = (Dim("n", SAMPLE, n), Dim("c", PARAMETER, out_channels),
                     Dim("h", ATTRIBUTE, oh), Dim("w", ATTRIBUTE, ow),
                     Dim("ci", REDUCTION, cin // groups))
        self.set_activation(activation)
        self.labels = None           # halos and groups: part() gives every rect

    def part(self, degrees, color) -> PartSpec:
        """Rects of one part: the output block, its input halo, its weight rows and columns."""
        rg = self.ranges(degrees, color)
        (n0, n1), (c0, c1), (h0, h1), (w0, w1), (j0, j1) = (rg[d.name] for d in self.dims)
        pr = self.params
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = (pr["kernel_size"], pr["stride"],
                                                  pr["padding"], pr["dilation"])
        _, cin, h, w = self.inputs[0].shape
        cg, og = cin // pr["groups"], pr["out_channels"] // pr["groups"]
        glo, ghi = c0 // og, (c1 - 1) // og
        span = ghi - glo + 1
        r0, r1, top, bottom = halo(h0, h1, h, kh, sh, ph, dh)
        q0, q1, left, right = halo(w0, w1, w, kw, sw, pw, dw)
        weights = (Rect((c0, j0, 0, 0), (c1, j1, kh, kw)),)
        if pr["bias"]:
            first = color[-1] == 0                      # bias only in the first ci-part
            weights += (Rect((c0,), (c1,)) if first else Rect((0,), (0,)),)
        pad = (left, right, top, bottom)
        geometry = ((h1 - h0, w1 - w0), (kh, kw), (sh, sw), (dh, dw))
        implicit, explicit = split_padding(pad, (r1 - r0, q1 - q0), *geometry)
        # A last part whose windows end before the input does (a stride-2 1x1 convolution
        # of an even size reads 7 rows of 8) reads to the end instead, when the operator's
        # padding then still makes its windows: a part of the whole input is then all of
        # its buffer (contiguous, no strided copy in the kernel; its gradient adoptable).
        tail = (h - r1 if h1 == self.outputs[0].shape[2] and not bottom else 0,
                w - q1 if w1 == self.outputs[0].shape[3] and not right else 0)
        if any(tail) and not any(explicit):
            wider = split_padding(pad, (r1 - r0 + tail[0], q1 - q0 + tail[1]), *geometry)
            if wider[0] == implicit and not any(wider[1]):
                r1, q1 = r1 + tail[0], q1 + tail[1]
        info = ConvPart(pad, implicit, explicit, span,
                        c0 - glo * og if span > 1 else 0,
                        (ghi + 1) * og - c1 if span > 1 else 0,
                        cg if span > 1 and j1 - j0 < cg else 0)
        x = Rect((n0, glo * cg + j0, r0, q0), (n1, ghi * cg + j1, r1, q1))
        y = Rect((n0, c0, h0, w0), (n1, c1, h1, w1))
        return PartSpec((x,), weights, (y,), degrees[-1] > 1, info)

    def forward(self, spec, inputs, weights):
        x = inputs[0]
        w, b = (weights + [None])[:2]
        info: ConvPart = spec.info
        if x is None:                # every row or column this part reads is padding
            x = w.new_zeros(spec.inputs[0].shape)
        if any(info.explicit):
            x = F.pad(x, info.explicit)
        if info.group_in:            # keep each spanned group's ci range
            jn, gi = w.shape[1], info.group_in
            x = torch.cat([x[:, t * gi:t * gi + jn] for t in range(info.span)], 1)
        if info.span > 1:
            w = F.pad(w, (0, 0, 0, 0, 0, 0, info.front, info.back))
            b = None if b is None else F.pad(b, (info.front, info.back))
        pr = self.params
        y = F.conv2d(x, w, b, pr["stride"], info.padding, pr["dilation"], info.span)
        if info.span > 1:
            y = y[:, info.front:y.shape[1] - info.back]
        return [activate(self.activation, y)]

    explicit_backward = True

    def forward_saving(self, spec, inputs, weights):
        """forward() without autograd for a part that is one plain convolution (no explicit
        padding, within one group, reading some input), saving what backward() needs."""
        x, info = inputs[0], spec.info
        if x is None or info.span > 1 or info.group_in or any(info.explicit):
            return None
        w = weights[0]
        b = weights[1] if len(weights) > 1 else None
        pr = self.params
        y, act = activate_saving(self.activation, F.conv2d(x, w, b, pr["stride"],
                                                            info.padding, pr["dilation"]))
        return [y], (x, w, b is not None, act)

    def backward(self, spec, saved, output_grads, need_inputs, need_weights):
        """The convolution's and the activation's derivatives as autograd runs them."""
        x, w, has_bias, act = saved
        dy = activation_backward(self.activation, output_grads[0], act, self)
        pr = self.params
        dx, dw, db = _convolution_backward(
            dy, x, w, [w.shape[0]] if has_bias else None, pr["stride"], spec.info.padding,
            pr["dilation"], False, (0, 0), 1,
            [need_inputs[0], need_weights[0], has_bias and need_weights[1]])
        return [dx], [dw, db]

    def saved_state_bytes(self, spec, input_grads, weight_grads):
        """forward_saving keeps its input and weights (regions) and what the activation's
        derivative reads. A part with explicit padding (autograd's path: a spatially split
        convolution's edge parts) keeps the same and the padded input, a new tensor, which
        the convolution saves whenever its input's or weight's gradient is wanted. The
        other parts forward_saving refuses are measured."""
        info = spec.info
        if spec.inputs[0].empty or spec.weights[0].empty or info.span > 1 or info.group_in:
            return None
        act = workshape.activation_saved_bytes(self.activation, spec.outputs[0].shape,
                                               self.inputs[0].dtype)
        if not any(info.explicit):
            return act
        if not (input_grads[0] or weight_grads[0]):
            return None             # (no graph, or the bias's gradient alone: measured)
        (n, c, h, w), (left, right, top, bottom) = spec.inputs[0].shape, info.explicit
        padded = n * c * (h + top + bottom) * (w + left + right)
        return padded * getattr(torch, self.inputs[0].dtype).itemsize + act

    def work(self, phase, spec, plan):
        """The convolution (after an explicit pad: one more kernel, and its derivative in
        backward when the input's gradient is wanted), its activation; backward's
        activation derivative and convolution_backward. Parts reading only padding or
        spanning groups are counted."""
        info = spec.info
        if spec.inputs[0].empty or info.span > 1 or info.group_in:
            return None
        x, w, y = spec.inputs[0].shape, spec.weights[0].shape, spec.outputs[0].shape
        pad = any(info.explicit)
        if phase == "fwd":
            return PartWork(workshape.conv(x, w, y),
                            1 + pad + activation_kernels(self.activation))
        if pad:
            x = (x[0], x[1], x[2] + info.explicit[2] + info.explicit[3],
                 x[3] + info.explicit[0] + info.explicit[1])
        has_bias = len(spec.weights) > 1 and not spec.weights[1].empty
        mask = [plan.need_inputs[0], plan.need_weights[0],
                has_bias and plan.need_weights[1]]
        return PartWork(workshape.conv_backward(y, x, w, mask),
                        1 + (pad and mask[0]) + activation_backward_kernels(self.activation))

    def reference(self, inputs, weights):
        pr = self.params
        y = F.conv2d(inputs[0], weights[0], weights[1] if len(weights) > 1 else None,
                     pr["stride"], pr["padding"], pr["dilation"], pr["groups"])
        return [activated(self.activation, y)]

    def init_weights(self, generator):
        shape = self.weights[0].shape
        w = torch.empty(shape)
        torch.nn.init.kaiming_uniform_(w, a=math.sqrt(5), generator=generator)
        if not self.params["bias"]:
            return [w]
        fan_in = shape[1] * shape[2] * shape[3]
        bound = 1 / math.sqrt(fan_in)
        return [w, torch.empty(shape[0]).uniform_(-bound, bound, generator=generator)]


@builder
def conv2d(model: Model, x: Tensor, out_channels: int, kernel_size, stride=1, padding=0,
           dilation=1, groups: int = 1, bias: bool = True, name: str | None = None,
           activation: str | None = None) -> Tensor:
    """2-d convolution, like torch.nn.Conv2d(x.shape[1], out_channels, kernel_size, stride,
    padding, dilation, groups, bias), followed by `activation` ("relu", "gelu", "tanh", "relu6",
    "sigmoid") when given: one operator, one launch (see parallel_ops/activation.py)."""
    return model.add_op(Conv2d(model, x, out_channels, kernel_size, stride, padding, dilation,
                            groups, bias, name, activation)).outputs[0]
