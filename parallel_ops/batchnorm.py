"""batchnorm2d: batch normalization of NCHW tensors, equal to torch.nn.BatchNorm2d.

Dims: n (sample), c (parameter: channels; splits gamma, beta and the running statistics),
h, w (attribute). Training statistics cover the whole batch and spatial extent whatever
the split, so in training the operator lowers to five launches:
  stats          each part sums x per channel into `<name>.stats` (1, C); n, h and w are
                 reduction dims of this stage, so split parts give partial sums;
  centered       each part sums (x - mean)^2 per channel into `<name>.centered` (1, C),
                 with the mean from the summed stats. Two passes, as torch's own
                 statistics are centred: the variance as E[x^2] - E[x]^2 cancels
                 catastrophically in float32 when the mean is large against the spread;
  normalize      y = (x - mean) / sqrt(var + eps) * gamma + beta from the summed stats
                 (biased variance). Autograd flows back through all three stages: this
                 stage's backward gives the gradients of the sums, the first two stages'
                 turn them into dx;
  running_next   (replicated) the new running mean and unbiased running variance into
                 `<name>.running_next` (2, C), from the sums and the current buffers;
  running_write  (replicated) copies them into the buffers running_mean / running_var.
The last two are separate launches because a launch cannot both read a buffer as a
weight and write it: the second writes with RW what the first computed. Each device
holding a part of the buffers updates its own replica, so replicas stay identical.
Evaluation (compiled with training=False) is a single launch using the running stats.
`activation` (e.g. "relu") is applied to y by the normalize launch (or the evaluation one);
see parallel_ops/activation.py.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from taskrt.geometry import Rect

from .activation import FusesActivation, activate, activated, check_activation
from .errors import ShapeError
from .model import Model, builder
from .nchw import check_nchw
from .op import ATTRIBUTE, PARAMETER, REDUCTION, SAMPLE, Dim, Op, PartSpec, Stage
from .tensor import Tensor

NCHW = ("n", "c", "h", "w")


class BatchNorm2d(FusesActivation, Op):
    type = "batchnorm2d"

    def __init__(self, model: Model, x: Tensor, eps: float = 1e-5, momentum=0.1,
                 affine: bool = True, name: str | None = None, activation: str | None = None):
        super().__init__(model.unique_name("batchnorm2d", name))
        where = f"batchnorm2d '{self.name}'"
        check_nchw(where, x)
        check_activation(where, activation)     # before the model gets its weights
        n, c, h, w = x.shape
        count = n * h * w
        if count < 2:
            raise ShapeError(f"{where}: input '{x.name}' of shape {x.shape} has {count} value "
                             "per channel; training statistics need more than 1. Use a larger "
                             "batch or spatial size.")
        if not eps > 0:
            raise ShapeError(f"{where}: eps {eps!r} must be positive.")
        if momentum is not None and not 0 <= momentum <= 1:
            raise ShapeError(f"{where}: momentum {momentum!r} must be in [0, 1], or None for "
                             "a cumulative average.")
        self.model = model           # momentum=None reads the step count
        self.count = count
        self.params = {"eps": eps, "momentum": momentum, "affine": affine}
        self.inputs = [x]
        if affine:
            model.new_weight(self, "weight", (c,))
            model.new_weight(self, "bias", (c,))
        running = (model.new_weight(self, "running_mean", (c,), trainable=False),
                   model.new_weight(self, "running_var", (c,), trainable=False))
        y = model.new_tensor(self, x.shape)
        self.dims = (Dim("n", SAMPLE, n), Dim("c", PARAMETER, c), Dim("h", ATTRIBUTE, h),
                     Dim("w", ATTRIBUTE, w))
        self.set_activation(activation)
        affine_w = self.weights[:2] if affine else []
        self.labels = {"inputs": (NCHW,), "weights": (("c",),) * len(self.weights),
                       "outputs": (NCHW,)}
        self.check_declaration()     # the evaluation launch; Model.add checks the others
        stats = Tensor(f"{self.name}.stats", (1, c), x.dtype, producer=self,
                       requires_grad=x.requires_grad)
        centered = Tensor(f"{self.name}.centered", (1, c), x.dtype, producer=self,
                          requires_grad=x.requires_grad)
        nxt = Tensor(f"{self.name}.running_next", (2, c), x.dtype, producer=self)
        reduced = {"n": REDUCTION, "h": REDUCTION, "w": REDUCTION}
        per_channel = (None, "c")
        self._training_stages = [
            Stage(self, "stats", [x], [stats], self._stats,
                  labels={"inputs": (NCHW,), "weights": (), "outputs": (per_channel,)},
                  kinds=reduced),
            Stage(self, "centered", [x, stats], [centered], self._centered,
                  labels={"inputs": (NCHW, per_channel), "weights": (),
                          "outputs": (per_channel,)}, kinds=reduced),
            Stage(self, "normalize", [x, stats, centered], [y], self._normalize,
                  weights=affine_w,
                  labels={"inputs": (NCHW, per_channel, per_channel),
                          "weights": (("c",),) * len(affine_w), "outputs": (NCHW,)}),
            Stage(self, "running_next", [stats, centered], [nxt], self._running_next,
                  weights=running, part=_channels_part, differentiable=False,
                  replicated=True),
            Stage(self, "running_write", [nxt], list(running), _split_rows,
                  part=_channels_part, differentiable=False, replicated=True),
        ]

    def output_writers(self):
        return [self, self._training_stages[2]]          # evaluation, normalize

    def stages(self):
        """Five launches in training (see the module docstring); itself in evaluation."""
        return self._training_stages if self.training else [self]

    def _mean_var(self, stats, centered):
        return stats[0] / self.count, centered[0] / self.count

    def _stats(self, spec, inputs, weights):
        return [inputs[0].sum((0, 2, 3))[None]]

    def _centered(self, spec, inputs, weights):
        x, stats = inputs
        d = x - _bc(stats[0] / self.count)
        return [(d * d).sum((0, 2, 3))[None]]

    def _normalize(self, spec, inputs, weights):
        x, stats, centered = inputs
        mean, var = self._mean_var(stats, centered)
        y = self._affine((x - _bc(mean)) * _bc(torch.rsqrt(var + self.params["eps"])), weights)
        return [activate(self.activation, y)]

    def _running_next(self, spec, inputs, weights):
        mean, var = self._mean_var(*inputs)
        rm, rv = weights
        m = self.params["momentum"]
        m = 1.0 / self.model.step_count if m is None else m
        unbiased = var * (self.count / (self.count - 1))
        return [torch.stack((rm * (1 - m) + mean * m, rv * (1 - m) + unbiased * m))]

    def _affine(self, y, weights):
        if not self.params["affine"]:
            return y
        return y * _bc(weights[0]) + _bc(weights[1])

    def forward(self, spec, inputs, weights):
        """Evaluation: normalize with the running statistics."""
        rm, rv = weights[-2:]
        y = (inputs[0] - _bc(rm)) * _bc(torch.rsqrt(rv + self.params["eps"]))
        return [activate(self.activation, self._affine(y, weights[:-2]))]

    def reference(self, inputs, weights):
        pr = self.params
        gamma, beta = weights[:2] if pr["affine"] else (None, None)
        m = pr["momentum"]
        m = 1.0 / self.model.step_count if m is None and self.training else m
        y = F.batch_norm(inputs[0], weights[-2], weights[-1], gamma, beta, self.training,
                         0.0 if m is None else m, pr["eps"])
        return [activated(self.activation, y)]

    def init_weights(self, generator):
        c = self.dims[1].extent
        running = [torch.zeros(c), torch.ones(c)]
        return ([torch.ones(c), torch.zeros(c)] if self.params["affine"] else []) + running


def _bc(v: torch.Tensor) -> torch.Tensor:
    """A per-channel vector shaped to broadcast over NCHW."""
    return v[None, :, None, None]


def _channels_part(stage, degrees, color) -> PartSpec:
    """A replicated stage's part: its channel block of the stats and buffers."""
    c0, c1 = stage.ranges(degrees, color)["c"]
    cols = Rect((c0,), (c1,))

    def rect(t):
        return Rect((0, c0), (t.shape[0], c1)) if t.ndim == 2 else cols
    return PartSpec(tuple(rect(t) for t in stage.inputs), (cols,) * len(stage.weights),
                    tuple(rect(t) for t in stage.outputs))


def _split_rows(spec, inputs, weights):
    return [inputs[0][0], inputs[0][1]]


@builder
def batchnorm2d(model: Model, x: Tensor, eps: float = 1e-5, momentum=0.1, affine: bool = True,
                name: str | None = None, activation: str | None = None) -> Tensor:
    """Batch normalization over (N, H, W) per channel, like torch.nn.BatchNorm2d(C, eps,
    momentum, affine) in training mode, and in eval mode when compiled with training=False;
    momentum=None is PyTorch's cumulative average over the steps run. `activation` ("relu",
    "gelu", "tanh", "sigmoid") follows it in the same launch (parallel_ops/activation.py)."""
    return model.add_op(BatchNorm2d(model, x, eps, momentum, affine, name,
                                    activation)).outputs[0]
