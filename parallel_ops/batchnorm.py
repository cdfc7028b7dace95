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
  normalize      y = x * alpha + beta per channel, alpha = gamma / sqrt(var + eps) and
                 beta = beta - mean * alpha, from the summed stats (biased variance). It
                 has its own backward (`explicit_backward`): the input gradient's direct
                 term, gamma's and beta's gradients, and the gradients of the two sums,
                 which the first two stages' backward (autograd) turn into the rest of dx;
  running_next   (replicated) the new running mean and unbiased running variance into
                 `<name>.running_next` (2, C), from the sums and the current buffers;
  running_write  (replicated) copies them into the buffers running_mean / running_var.
The last two are separate launches because a launch cannot both read a buffer as a
weight and write it: the second writes with RW what the first computed. Each device
holding a part of the buffers updates its own replica, so replicas stay identical.

When the config splits none of n, h and w (one device, or channels only), every part holds
all of its channels' values, so it needs no summed statistics: normalize then runs torch's
own kernel (torch.native_batch_norm, the call eager PyTorch makes, so the same bits) on
copies of the running buffers, which it reads as weights, and writes the updated copies
to `<name>.running_next` itself; its backward is torch's (native_batch_norm_backward, the
whole input gradient). The stats, centered and running_next parts then have empty rects
(part() knows the degrees): they read and write nothing, and the sums get no gradient.
The launches are the same under every config (lowering re-lowers one operator at a time);
only the rects differ. Measured on ResNet-18 (docs/design.md): the statistics stages and
their zero gradients cost ~5 ms of a ~60 ms CPU iteration.
Evaluation (compiled with training=False) is a single launch using the running stats.
`activation` (e.g. "relu") is applied to y by the normalize launch (or the evaluation one);
see parallel_ops/activation.py.

Precision follows torch's CPU kernels (aten/src/ATen/native/cpu/batch_norm_kernel.cpp,
Normalization.cpp), which accumulate in at::acc_type, float64 for float32 inputs
(`accumulation_dtype`): the sums of x, of (x - mean)^2 and, in backward, of dy and of
(x - mean) * dy are taken in it, and so are the two sums' tensors (and their gradients),
so partial sums of split parts are added in it too; mean, variance and 1/sqrt(var + eps)
are rounded to the input's dtype where torch rounds them, and y = x * alpha + beta with
one rounding (torch's compiled kernel fuses the multiply-add; torch.addcmul does too).
Without this, a float32 model whose batch norms see near-constant channels (timm's
MobileNetV2 after one large step) drifts from eager PyTorch far beyond rounding.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from taskrt.geometry import Rect

from .activation import (FusesActivation, activate, activate_saving, activated,
                         activation_backward, check_activation)
from .workshape import activation_backward_kernels, activation_kernels, activation_saved_bytes
from .errors import ShapeError
from .model import Model, builder
from .nchw import check_nchw
from .op import ATTRIBUTE, PARAMETER, REDUCTION, SAMPLE, Dim, Op, PartSpec, PartWork, Stage
from .tensor import Tensor

NCHW = ("n", "c", "h", "w")
PER_CHANNEL = (None, "c")


def accumulation_dtype(dtype: str) -> str:
    """The dtype torch's CPU batch norm sums `dtype` values in (at::acc_type): float32
    for the half types, float64 otherwise."""
    return "float32" if dtype in ("float16", "bfloat16") else "float64"


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
        self.accumulate = getattr(torch, accumulation_dtype(x.dtype))
        self.params = {"eps": eps, "momentum": momentum, "affine": affine}
        self._fixed_momenta = None if momentum is None else \
            (getattr(torch, x.dtype), _rounded_momenta(momentum, getattr(torch, x.dtype)))
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
        sums = [Tensor(f"{self.name}.{tag}", (1, c), accumulation_dtype(x.dtype),
                       producer=self, requires_grad=x.requires_grad)
                for tag in ("stats", "centered")]
        stats, centered = sums
        nxt = Tensor(f"{self.name}.running_next", (2, c), x.dtype, producer=self)
        reduced = {"n": REDUCTION, "h": REDUCTION, "w": REDUCTION}
        self._training_stages = [
            _SumStage(self, "stats", [x], [stats], self._stats,
                      labels={"inputs": (NCHW,), "weights": (), "outputs": (PER_CHANNEL,)},
                      kinds=reduced, part=_split_samples_part, work=_stats_work),
            _SumStage(self, "centered", [x, stats], [centered], self._centered,
                      labels={"inputs": (NCHW, PER_CHANNEL), "weights": (),
                              "outputs": (PER_CHANNEL,)}, kinds=reduced,
                      part=_split_samples_part, work=_centered_work),
            _Normalize(self, [x, stats, centered], [y, nxt], affine_w + list(running)),
            Stage(self, "running_next", [stats, centered], [nxt], self._running_next,
                  weights=running, part=_running_next_part, differentiable=False,
                  replicated=True, work=_running_next_work),
            Stage(self, "running_write", [nxt], list(running), _split_rows,
                  part=_channels_part, differentiable=False, replicated=True,
                  work=lambda stage, phase, spec, plan: PartWork(0, 0)),
        ]

    def output_writers(self):
        return [self, self._training_stages[2]]          # evaluation, normalize

    def stages(self):
        """Five launches in training (see the module docstring); itself in evaluation."""
        return self._training_stages if self.training else [self]

    # -- training: the statistics ------------------------------------------------------------
    def _stats(self, spec, inputs, weights):
        return [inputs[0].sum((0, 2, 3), dtype=self.accumulate)[None]]

    def _centered(self, spec, inputs, weights):
        """The sum of (x - mean)^2, the mean rounded to x's dtype as torch's. The mean is
        held constant for autograd: the sum's derivative by it, -2/N * sum(x - mean), is
        zero (torch's backward leaves it out as well)."""
        x, stats = inputs
        if stats.requires_grad:
            stats = stats.detach()
        d = x - (stats / self.count).to(x.dtype).view(1, -1, 1, 1)
        return [(d * d).sum((0, 2, 3), dtype=self.accumulate).view(1, -1)]

    def _mean(self, stats, dtype):
        return (stats[0] / self.count).to(dtype)

    def _mean_invstd(self, stats, centered, dtype):
        """The mean and 1/sqrt(var + eps) from the sums, rounded as torch's kernel: the
        mean and the centred sum to `dtype`, the variance divided there, the root taken
        in the accumulation dtype."""
        var = centered[0].to(dtype) / self.count
        invstd = torch.sqrt(var.to(self.accumulate) + self.params["eps"]).reciprocal()
        return self._mean(stats, dtype), invstd.to(dtype)

    def _linear_terms(self, mean, invstd, weights):
        """(alpha, beta) of y = x * alpha + beta: alpha = gamma * invstd, beta = beta -
        mean * alpha in one rounding, as torch's kernel computes them."""
        if not self.params["affine"]:
            return invstd, -mean * invstd
        gamma, beta = weights
        alpha = invstd * gamma
        return alpha, torch.addcmul(beta, -mean, alpha)

    def _normalized(self, inputs, weights):
        """(y before the activation, what the normalize stage's backward needs)."""
        x, stats, centered = inputs
        mean, invstd = self._mean_invstd(stats, centered, x.dtype)
        alpha, beta = self._linear_terms(mean, invstd, weights)
        gamma = weights[0] if self.params["affine"] else None
        return torch.addcmul(_bc(beta), x, _bc(alpha)), (x, mean, invstd, alpha, gamma)

    def _normalize_backward(self, saved, dy, need_inputs, need_weights):
        """Gradients of x (its direct term), of the two sums and of gamma and beta, with
        torch's backward sums (of dy and of (x - mean) * dy) in the accumulation dtype.
        The sums' gradients: y depends on the sum of x through the mean (-gamma * invstd /
        N per unit of dy) and on the centred sum through the variance (-gamma * invstd^3 /
        (2N) per unit of (x - mean) * dy); the first two stages' backward multiply them
        by 1 and by 2 (x - mean) into dx, the rest of torch's input gradient."""
        x, mean, invstd, alpha, gamma, act = saved
        dz = activation_backward(self.activation, dy, act, self)
        d = x - _bc(mean)
        acc = self.accumulate
        sum_dz = dz.sum((0, 2, 3), dtype=acc)
        dot = (d * dz).sum((0, 2, 3), dtype=acc)
        inv = invstd.to(acc)
        scale = inv if gamma is None else inv * gamma.to(acc)
        dx = dz * _bc(alpha) if need_inputs[0] else None
        d_stats = (-(scale / self.count) * sum_dz)[None] if need_inputs[1] else None
        d_centered = (-0.5 * scale * inv * inv / self.count * dot)[None] \
            if need_inputs[2] else None
        d_weights = []
        if gamma is not None:
            d_weights = [(dot * inv).to(x.dtype) if need_weights[0] else None,
                         sum_dz.to(x.dtype) if need_weights[1] else None]
        return [dx, d_stats, d_centered], d_weights

    def _native_normalized(self, inputs, weights):
        """For a part of whole samples (_whole_samples): y from torch's own kernel, as eager
        PyTorch computes it (the same call, so the same bits), with the running statistics
        updated in copies of the buffers (the weights' last two): (y, the copies as the
        (2, C) running_next part, what the derivative needs)."""
        x = inputs[0]
        gamma, beta = weights[:2] if self.params["affine"] else (None, None)
        rm, rv = weights[-2:]
        nxt = torch.cat((rm, rv)).view(2, -1)
        new_mean, new_var = nxt.unbind()
        y, mean, invstd = torch.native_batch_norm(x, gamma, beta, new_mean, new_var, True,
                                                  self._momentum(), self.params["eps"])
        return y, nxt, (_NATIVE, x, gamma, mean, invstd)

    def capture_hazard(self, spec=None) -> str | None:
        """momentum=None (a cumulative average) reads the step count on the host every
        step: a CUDA graph would bake one (taskrt.executor.capture runs it eagerly)."""
        if self.training and self.params["momentum"] is None:
            return "batch norm's cumulative average (momentum=None) reads the step count"
        return None

    def _momentum(self) -> float:
        """The factor eager PyTorch passes to its kernel: momentum, or 1 / steps run (a part
        run before the first step, as saved_state measures one, takes the first step's)."""
        m = self.params["momentum"]
        return 1.0 / max(self.model.step_count, 1) if m is None else m

    def _native_backward(self, saved, dy, need_inputs, need_weights):
        """torch's derivative (what autograd runs for F.batch_norm): the whole input
        gradient. The sums are not read by such a part (empty rects): no gradient for
        them."""
        _, x, gamma, mean, invstd, act = saved
        dz = activation_backward(self.activation, dy, act, self)
        affine = gamma is not None
        mask = [bool(need_inputs[0]), affine and bool(need_weights[0]),
                affine and bool(need_weights[1])]
        dx, dgamma, dbeta = torch.ops.aten.native_batch_norm_backward.default(
            dz, x, gamma, None, None, mean, invstd, True, self.params["eps"], mask)
        return [dx, None, None], ([dgamma, dbeta] if affine else [])

    def _running_next(self, spec, inputs, weights):
        """torch's update: momentum in the buffers' dtype, the mean's update there, the
        unbiased variance's in the accumulation dtype. On the (1, C) sums as they come
        (no row selected) with the momenta as Python numbers already rounded to the
        buffers' dtype, which torch's kernels multiply by as they would by 0-d tensors of
        that dtype: 14 aten operations (19 with 0-d momentum tensors and rows selected).
        Nothing for a part of whole samples' config (normalize gives running_next)."""
        if spec is not None and spec.outputs[0].empty:
            return [None]
        stats, centered = inputs
        rm, rv = weights
        m, keep = self._momenta(rm.dtype)
        mean = (stats / self.count).to(rm.dtype)
        unbiased = centered.to(rm.dtype).to(self.accumulate) / (self.count - 1)
        var = unbiased * m + (rv * keep).to(self.accumulate)
        return [torch.cat((mean * m + rm * keep, var.to(rm.dtype)))]

    def _momenta(self, dtype):
        """(m, 1 - m) as Python floats holding values of `dtype`, rounded as torch rounds
        them: computed once for a fixed momentum, every call (the same operations every
        call: the cost model counts a part's operations on its first run, strategy.costs)
        for momentum=None, whose m is 1 / the step count."""
        m = self.params["momentum"]
        if self._fixed_momenta is not None and self._fixed_momenta[0] == dtype:
            return self._fixed_momenta[1]
        return _rounded_momenta(self._momentum(), dtype)

    # -- evaluation and the reference -------------------------------------------------------
    def forward(self, spec, inputs, weights):
        """Evaluation: normalize with the running statistics (torch's rounding)."""
        rm, rv = weights[-2:]
        invstd = (rv + self.params["eps"]).sqrt().reciprocal()
        alpha, beta = self._linear_terms(rm, invstd, weights[:-2])
        return [activate(self.activation, torch.addcmul(_bc(beta), inputs[0], _bc(alpha)))]

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


class _SumStage(Stage):
    """batchnorm2d's stats or centered launch. Its part of a config that splits no sample
    dim is empty (_split_samples_part): it then runs nothing, without autograd
    (Op.explicit_backward), and its backward has nothing to give."""
    explicit_backward = True

    def forward(self, spec, inputs, weights):
        return [None] if spec.outputs[0].empty else Stage.forward(self, spec, inputs, weights)

    def forward_saving(self, spec, inputs, weights):
        return ([None], None) if spec.outputs[0].empty else None

    def saved_state_bytes(self, spec, input_grads, weight_grads):
        """An empty part keeps nothing. Others run autograd: the stats' sum keeps sizes
        alone; centered's square keeps x - mean (the statistics are detached), when x's
        gradient is wanted. Reduced precision is measured."""
        dtype = self.inputs[0].dtype
        if spec.outputs[0].empty:
            return 0
        if spec.inputs[0].empty or dtype not in ("float32", "float64"):
            return None
        if self.type.endswith(".stats") or not input_grads[0]:
            return 0
        return math.prod(spec.inputs[0].shape) * getattr(torch, dtype).itemsize

    def backward(self, spec, saved, output_grads, need_inputs, need_weights):
        """An empty part's: it read nothing, so no gradient is asked of it."""
        return [None] * len(self.inputs), []


class _Normalize(Stage):
    """batchnorm2d's normalize launch, with its own backward (Op.explicit_backward). Its
    weights are gamma and beta (affine) and the running buffers, read only by a part of
    whole samples; its outputs y and running_next, written only by such a part."""
    explicit_backward = True

    def __init__(self, bn: BatchNorm2d, inputs, outputs, weights):
        super().__init__(bn, "normalize", inputs, outputs, None, weights=weights,
                         labels={"inputs": (NCHW, PER_CHANNEL, PER_CHANNEL),
                                 "weights": (("c",),) * len(weights),
                                 "outputs": (NCHW, PER_CHANNEL)}, part=_normalize_part)

    def forward(self, spec, inputs, weights):
        return self.forward_saving(spec, inputs, weights)[0]

    def forward_saving(self, spec, inputs, weights):
        bn = self.parent
        nxt = None
        if _whole_samples(spec):
            y, nxt, saved = bn._native_normalized(inputs, weights)
        else:
            y, saved = bn._normalized(inputs, weights[:len(weights) - 2])
        out, act = activate_saving(bn.activation, y)
        return [out, nxt], saved + (act,)

    def saved_state_bytes(self, spec, input_grads, weight_grads):
        """Per channel of the part, in x's dtype (float32, float64; reduced precision is
        measured): a part of whole samples (torch's kernel) its batch mean and 1/std, one
        of split samples (_normalized) its mean, 1/std and, affine, gamma * 1/std; and
        what the activation's derivative reads (x, gamma, the running copies: regions)."""
        dtype = self.inputs[0].dtype
        if spec.inputs[0].empty or dtype not in ("float32", "float64"):
            return None
        bn = self.parent
        kept = 2 if _whole_samples(spec) or not bn.params["affine"] else 3
        return kept * spec.inputs[0].shape[1] * getattr(torch, dtype).itemsize + \
            activation_saved_bytes(bn.activation, spec.outputs[0].shape, dtype)

    def work(self, phase, spec, plan):
        return _normalize_work(self, phase, spec, plan)

    def backward(self, spec, saved, output_grads, need_inputs, need_weights):
        if saved[0] is _NATIVE:
            return self.parent._native_backward(saved, output_grads[0], need_inputs,
                                                need_weights)
        return self.parent._normalize_backward(saved, output_grads[0], need_inputs,
                                               need_weights)


_NATIVE = "native"              # the tag of what _native_normalized saves


# -- declared work (Op.work; strategy/costs/formulas.py): the kernels the code above runs.
# A cast (.to) dispatches a kernel only between different dtypes: `_casts` counts them.

def _casts(*pairs) -> int:
    return sum(a != b for a, b in pairs)


def _dtypes(stage):
    """(x's dtype, the accumulation dtype), as torch dtypes."""
    bn = stage.parent
    return getattr(torch, bn.inputs[0].dtype), bn.accumulate


def _stats_work(stage, phase, spec, plan):
    """A sum; backward: autograd's cast of the expanded gradient to x's dtype."""
    if spec.outputs[0].empty:
        return PartWork(0, 0, nones=(0,))
    x, acc = _dtypes(stage)
    return PartWork(0, 1) if phase == "fwd" else PartWork(0, _casts((acc, x)))


def _centered_work(stage, phase, spec, plan):
    """Forward: the mean (a division, a cast), x - mean, its square, the sum. Backward
    (autograd): the sum's cast, the square's two products and their sum, zeros for the
    detached mean's gradient; only zeros when x wants no gradient."""
    if spec.outputs[0].empty:
        return PartWork(0, 0, nones=(0,))
    x, acc = _dtypes(stage)
    if phase == "fwd":
        return PartWork(0, 4 + _casts((acc, x)))
    if not plan.need_inputs[0]:
        return PartWork(0, len(plan.targets))
    return PartWork(0, 3 + _casts((acc, x)) + plan.need_inputs[1])


def _running_next_work(stage, phase, spec, plan):
    """_running_next's nine operations and casts; counted under momentum=None (its
    momenta are computed with CPU tensors every call)."""
    if spec.outputs[0].empty:
        return PartWork(0, 0, nones=(0,))
    bn = stage.parent
    r = getattr(torch, bn.weights[-1].dtype)
    if bn._fixed_momenta is None or bn._fixed_momenta[0] != r:
        return None
    acc = bn.accumulate
    return PartWork(0, 9 + _casts((acc, r), (acc, r), (r, acc), (r, acc), (acc, r)))


def _normalize_work(stage, phase, spec, plan):
    """Whole samples: the buffers' cat and torch's kernel (or its backward). Split
    samples: _normalized's and _normalize_backward's operations and casts."""
    bn = stage.parent
    act = activation_kernels(bn.activation) if phase == "fwd" else \
        activation_backward_kernels(bn.activation)
    if _whole_samples(spec):
        return PartWork(0, (2 if phase == "fwd" else 1) + act)
    x, acc = _dtypes(stage)
    affine = bn.params["affine"]
    if phase == "fwd":
        return PartWork(0, 5 + 4 * _casts((acc, x)) + (3 if affine else 2) + 1 + act)
    ni, nw = plan.need_inputs, plan.need_weights
    k = act + 4 + _casts((x, acc)) + (1 + _casts((x, acc)) if affine else 0)
    k += ni[0] + 3 * ni[1] + 5 * ni[2]
    if affine:
        k += nw[0] * (1 + _casts((acc, x))) + nw[1] * _casts((acc, x))
    return PartWork(0, k)


def _samples_whole(degrees) -> bool:
    """Whether a config of batchnorm2d's dims (n, c, h, w) splits none of n, h and w: each
    part then holds every sample and position of its channels, its statistics its own."""
    return degrees[0] == degrees[2] == degrees[3] == 1


def _whole_samples(spec: PartSpec) -> bool:
    """Whether a normalize part is one of whole samples (it writes running_next)."""
    return not spec.outputs[1].empty


def _emptied(spec: PartSpec, inputs=(), weights=(), outputs=()) -> PartSpec:
    """`spec` with the rects at the given indices of each group made empty (not used)."""
    def group(rects, drop):
        return tuple(Rect(r.lo, r.lo) if i in drop else r for i, r in enumerate(rects))
    return PartSpec(group(spec.inputs, inputs), group(spec.weights, weights),
                    group(spec.outputs, outputs), spec.partial, spec.info)


def _split_samples_part(stage, degrees, color) -> PartSpec:
    """A stats or centered part: by the labels, or empty when samples are whole."""
    spec = Op.part(stage, degrees, color)
    if not _samples_whole(degrees):
        return spec
    return _emptied(spec, range(len(spec.inputs)), (), range(len(spec.outputs)))


def _normalize_part(stage, degrees, color) -> PartSpec:
    """A normalize part: whole samples read the running buffers (not the sums) and write
    running_next; split samples read the sums (not the buffers) and write y only."""
    spec = Op.part(stage, degrees, color)
    if _samples_whole(degrees):
        return _emptied(spec, inputs=(1, 2))
    n = len(spec.weights)
    return _emptied(spec, weights=(n - 2, n - 1), outputs=(1,))


def _running_next_part(stage, degrees, color) -> PartSpec:
    """A running_next part: its channel block, or empty when samples are whole."""
    spec = _channels_part(stage, degrees, color)
    if not _samples_whole(degrees):
        return spec
    return _emptied(spec, range(len(spec.inputs)), range(len(spec.weights)),
                    range(len(spec.outputs)))


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


def _rounded_momenta(m: float, dtype: torch.dtype) -> tuple[float, float]:
    """(m, 1 - m) rounded to `dtype` as 0-d tensors of it hold them, as Python floats."""
    m = torch.tensor(m, dtype=dtype)
    return m.item(), (1 - m).item()


def _split_rows(spec, inputs, weights):
    return list(inputs[0].unbind())


@builder
def batchnorm2d(model: Model, x: Tensor, eps: float = 1e-5, momentum=0.1, affine: bool = True,
                name: str | None = None, activation: str | None = None) -> Tensor:
    """Batch normalization over (N, H, W) per channel, like torch.nn.BatchNorm2d(C, eps,
    momentum, affine) in training mode, and in eval mode when compiled with training=False;
    momentum=None is PyTorch's cumulative average over the steps run. `activation` ("relu",
    "gelu", "tanh", "sigmoid") follows it in the same launch (parallel_ops/activation.py)."""
    return model.add_op(BatchNorm2d(model, x, eps, momentum, affine, name,
                                    activation)).outputs[0]
