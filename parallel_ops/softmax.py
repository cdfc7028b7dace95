"""softmax over the last axis, which may be split; and the two-launch row-statistics
lowering it shares with layernorm.

Dims: n (sample), s1.. (attribute: other leading axes), c (attribute: the softmax axis).
`row_stat_stages` lowers an op that normalizes rows of x over a split last axis to
  stats      part k writes statistics of its piece of each row, (m_k, s_k) here, into
             column k of `<name>.stats` (shape (..., C, 2); columns 0..Kc-1 are used);
  normalize  each part reads the Kc columns of its rows, combines them and writes its block.
Softmax keeps m_k = the piece's max and s_k = sum(exp(x - m_k)); normalize takes
m = max(m_k), s = sum(s_k * exp(m_k - m)) and y = exp(x - m) / s. The maxima only shift
the exponent (y is the same function of x for any constants m_k, m), so they are detached
and autograd through both stages gives the exact softmax gradient. One launch of combined
statistics replaces a max launch followed by a sum launch.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from taskrt.geometry import Rect
from taskrt.region import block_bounds
from taskrt.executor.zeros import zero_contribution

from .errors import ShapeError
from .model import Model, builder
from .op import ATTRIBUTE, SAMPLE, Dim, Op, PartSpec, PartWork, Stage
from .tasks import IN
from .tensor import Tensor


def row_dims(op_desc: str, x: Tensor, last: str, last_kind: str) -> tuple[Dim, ...]:
    """n (sample), s1.. (attribute), then `last` over the last axis of x."""
    if x.ndim < 2:
        raise ShapeError(f"{op_desc}: input '{x.name}' has shape {x.shape}; it needs a "
                         "batch axis and a feature axis.")
    *lead, feat = x.shape
    return (Dim("n", SAMPLE, lead[0]),
            *(Dim(f"s{k}", ATTRIBUTE, lead[k]) for k in range(1, len(lead))),
            Dim(last, last_kind, feat))


class _RowStage(Stage):
    """A stage of row_stat_stages with an explicit backward (Op.explicit_backward) for the
    parts that hold whole rows (the last axis unsplit, the common case): normalize then
    computes y from x alone with torch's fused kernel (`whole_saving`, `whole_backward`:
    torch's own derivative), and gives the statistics a zero gradient; the stats stage then
    computes nothing (its output is left unwritten: nothing reads it) and its backward
    gives x a zero gradient. Their sum is the exact gradient (the statistics of a
    whole row are a function of x that normalize's derivative already accounts for). Parts
    of split rows run autograd through both stages as before."""

    def __init__(self, *args, feat: int, whole_saving=None, whole_backward=None,
                 whole_backward_kernels=None, split_work=None, whole_saved_bytes=None,
                 **kw):
        super().__init__(*args, **kw)
        self._saved_bytes = whole_saved_bytes
        self.tag, self._split_work = args[1], split_work
        self.feat, self._saving, self._backward = feat, whole_saving, whole_backward
        self.explicit_backward = whole_saving is not None
        self._backward_kernels = whole_backward_kernels

    def work(self, phase, spec, plan):
        """Parts of whole rows: the stats part computes nothing and gives x a zero gradient
        (one zeros kernel); the normalize part runs torch's fused kernel (1) and its
        derivative (`whole_backward_kernels(plan)`), and gives the statistics a zero
        gradient. Parts of split rows (autograd through both stages): the op's
        `split_work(is_stats, phase, spec, plan)` when it gives one, else counted."""
        block = spec.inputs[0]
        if block.empty:
            return None
        if block.hi[-1] - block.lo[-1] != self.feat:
            return None if self._split_work is None else \
                self._split_work(self.tag == "stats", phase, spec, plan)
        if self._saving is None:
            return None
        stats = self._saving is _stats_skipped
        if phase == "fwd":
            return PartWork(0, 0, nones=(0,)) if stats else PartWork(0, 1)
        if stats:
            return PartWork(0, 1, zeros=(0,))
        zero = plan.need_inputs[1]
        return PartWork(0, self._backward_kernels(plan) + zero,
                        zeros=(plan.targets.index((IN, 1)),) if zero else ())

    def saved_state_bytes(self, spec, input_grads, weight_grads):
        """Parts of whole rows: what `whole_saving` keeps (the op's `whole_saved_bytes`);
        parts of split rows (autograd's path) are measured."""
        block = spec.inputs[0]
        if self._saved_bytes is None or block.empty or block.hi[-1] - block.lo[-1] != self.feat:
            return None
        return self._saved_bytes(spec)

    def forward_saving(self, spec, inputs, weights):
        block = spec.inputs[0]
        if inputs[0] is None or block.hi[-1] - block.lo[-1] != self.feat:
            return None
        return self._saving(spec, inputs, weights)

    def backward(self, spec, saved, output_grads, need_inputs, need_weights):
        return self._backward(spec, saved, output_grads, need_inputs, need_weights)


def _stats_skipped(spec, inputs, weights):
    """The stats stage's forward for whole rows: nothing is computed or written (the
    normalize part of whole rows reads x alone, and nothing else reads the statistics);
    saves what a zero gradient for x needs."""
    x = inputs[0]
    return [None], (x.shape, x.dtype, x.device)


def broadcast_zero(shape, dtype, device) -> torch.Tensor:
    """A zero gradient of `shape` as a broadcast scalar marked as zero: the runtime skips
    adding it to the gradient's buffer (or zeroes the buffer where it is stored), with no
    tensor of that size made and filled for it (taskrt.executor.zeros)."""
    return zero_contribution(shape, dtype, device)


def _stats_backward(spec, saved, output_grads, need_inputs, need_weights):
    shape, dtype, device = saved
    return [broadcast_zero(shape, dtype, device) if need_inputs[0] else None], []


def zero_stats_grad(spec, x: torch.Tensor, need: bool):
    """Normalize's (zero) gradient for the statistics of whole rows (see _RowStage)."""
    return broadcast_zero(spec.inputs[1].shape, x.dtype, x.device) if need else None


def row_stat_stages(op: Op, x: Tensor, y: Tensor, stats_fwd: Callable, norm_fwd: Callable,
                    weights: Sequence[Tensor] = (), whole_saving: Callable | None = None,
                    whole_backward: Callable | None = None,
                    whole_backward_kernels: Callable | None = None,
                    split_work: Callable | None = None,
                    whole_saved_bytes: Callable | None = None) -> list[Stage]:
    """The stats and normalize stages of `op` (dims from row_dims) computing y from x; with
    `whole_saving`/`whole_backward` (normalize's forward_saving/backward for parts of whole
    rows), an explicit backward for such parts (_RowStage), whose kernels (but the zero
    gradient's) `whole_backward_kernels(plan)` gives (Op.work); `split_work` declares
    the parts of split rows (_RowStage.work); `whole_saved_bytes(spec)` the bytes
    `whole_saving` keeps besides the regions (Op.saved_state_bytes)."""
    # norm_fwd gets the sizes of a row's Kc pieces as spec.info; weights split with the
    # last dim.
    *lead, feat = x.shape
    stats = Tensor(f"{op.name}.stats", (*lead, feat, 2), x.dtype, producer=op,
                   requires_grad=x.requires_grad)
    kc = len(op.dims) - 1
    row_labels = tuple(d.name for d in op.dims[:-1])
    x_labels = row_labels + (op.dims[-1].name,)

    def stats_part(stage, degrees, color):
        rg = stage.ranges(degrees, color)
        rows, k = stage.rect_for(lead, row_labels, rg), color[kc]
        return PartSpec((stage.rect_for(x.shape, x_labels, rg),), (),
                        (Rect(rows.lo + (k, 0), rows.hi + (k + 1, 2)),))

    def norm_part(stage, degrees, color):
        rg = stage.ranges(degrees, color)
        rows, block = stage.rect_for(lead, row_labels, rg), stage.rect_for(x.shape, x_labels, rg)
        sizes = tuple(hi - lo for lo, hi in (block_bounds(feat, degrees[kc], k)
                                             for k in range(degrees[kc])))
        return PartSpec((block, Rect(rows.lo + (0, 0), rows.hi + (degrees[kc], 2))),
                        tuple(stage.rect_for(w.shape, x_labels[-1:], rg) for w in weights),
                        (block,), info=sizes)

    explicit = whole_saving is not None
    return [_RowStage(op, "stats", [x], [stats], stats_fwd, part=stats_part, feat=feat,
                      whole_saving=_stats_skipped if explicit else None,
                      whole_backward=_stats_backward, split_work=split_work,
                      whole_saved_bytes=(lambda spec: 0) if explicit else None),
            _RowStage(op, "normalize", [x, stats], [y], norm_fwd, weights=weights,
                      part=norm_part, feat=feat, whole_saving=whole_saving,
                      whole_backward=whole_backward,
                      whole_backward_kernels=whole_backward_kernels, split_work=split_work,
                      whole_saved_bytes=whole_saved_bytes)]


def _softmax_stats(spec, inputs, weights):
    (x,) = inputs
    m = x.detach().amax(dim=-1, keepdim=True)
    return [torch.stack([m, torch.exp(x - m).sum(dim=-1, keepdim=True)], dim=-1)]


def _softmax_normalize(spec, inputs, weights):
    x, stats = inputs
    mk, sk = stats[..., 0].detach(), stats[..., 1]
    m = mk.amax(dim=-1, keepdim=True)
    s = (sk * torch.exp(mk - m)).sum(dim=-1, keepdim=True)
    return [torch.exp(x - m) / s]


def _softmax_saving(spec, inputs, weights):
    """Normalize of whole rows: torch's softmax, saving its output (what its derivative
    reads)."""
    y = torch.softmax(inputs[0], dim=-1)
    return [y], y


def _softmax_backward(spec, saved, output_grads, need_inputs, need_weights):
    y = saved
    dx = torch._softmax_backward_data(output_grads[0], y, -1, y.dtype) if need_inputs[0] \
        else None
    return [dx, zero_stats_grad(spec, y, need_inputs[1])], []


class Softmax(Op):
    type = "softmax"

    def __init__(self, model: Model, x: Tensor, dim: int = -1, name: str | None = None):
        super().__init__(model.unique_name("softmax", name))
        if dim not in (-1, x.ndim - 1):
            raise ShapeError(f"softmax '{self.name}': dim {dim} of '{x.name}' {x.shape} is "
                             "not the last axis; only the last axis is supported. Move it "
                             "last with model.transpose first.")
        self.dims = row_dims(f"softmax '{self.name}'", x, "c", ATTRIBUTE)
        self.params = {"classes": x.shape[-1]}
        self.inputs = [x]
        y = model.new_tensor(self, x.shape, x.dtype)
        self._stages = row_stat_stages(self, x, y, _softmax_stats, _softmax_normalize,
                                       whole_saving=_softmax_saving,
                                       whole_backward=_softmax_backward,
                                       whole_backward_kernels=lambda plan:
                                       int(plan.need_inputs[0]))

    def stages(self):
        return self._stages

    def reference(self, inputs, weights):
        return [torch.softmax(inputs[0], dim=-1)]


@builder
def softmax(model: Model, x: Tensor, dim: int = -1, name: str | None = None) -> Tensor:
    """Softmax over the last axis, like torch.softmax(x, dim=-1)."""
    return model.add_op(Softmax(model, x, dim, name)).outputs[0]
