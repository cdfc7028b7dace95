"""Softmax cross-entropy with integer labels (mean over samples), classes splittable.

Dims: n (sample), s1.. (attribute: other leading axes), c (the classes). With c split the
operator lowers to three launches, none needing autograd (its backward is closed-form):
  max      each part writes its row maxima into column k (its c-index) of `<name>.max`;
  sumexp   each part reads the Kc maxima of its rows, takes the global max m, and
           contributes sum(exp(x - m)) to `<name>.sumexp` (partial sums over c);
  loss     each part writes d(loss)/d(logits) = (softmax - onehot) / count straight into
           the logits' gradient region, and contributes its samples' -log p to the loss
           (with every class in one part, in fewer operations). Labels outside [0, C) are
           an error, as in torch.
With `ignore_index` (HF's -100 for padding and the last position of a causal LM), samples
with that label contribute nothing and the mean is over the others: each loss part then
reads all labels (small integers) to count them.
"""
from __future__ import annotations

from math import prod

import torch
import torch.nn.functional as F

from taskrt.geometry import Rect

from .errors import ShapeError
from .model import Model, builder
from .op import ATTRIBUTE, SAMPLE, Dim, Op, PartSpec, PartWork, Stage
from .tensor import Tensor


class SoftmaxCrossEntropy(Op):
    type = "softmax_ce"
    differentiable = False

    def __init__(self, model: Model, logits: Tensor, labels: Tensor, name: str | None = None,
                 ignore_index: int | None = None):
        super().__init__(model.unique_name("loss", name))
        *lead, classes = logits.shape
        if tuple(labels.shape) != tuple(lead):
            raise ShapeError(f"softmax_ce '{self.name}': labels '{labels.name}' have shape "
                             f"{labels.shape}; logits {logits.shape} need labels of shape "
                             f"{tuple(lead)}.")
        if not labels.dtype.startswith("int"):
            raise ShapeError(f"softmax_ce '{self.name}': labels '{labels.name}' must be an "
                             f"integer tensor, not {labels.dtype}.")
        self.inputs = [logits, labels]
        self.count = prod(lead)
        self.params = {"classes": classes}
        if ignore_index is not None:
            self.params["ignore_index"] = int(ignore_index)
        loss = model.new_tensor(self, (1,), logits.dtype)
        loss.requires_grad = False
        self.loss_tensor = loss
        lead_l = ("n",) + tuple(f"s{k}" for k in range(1, len(lead)))
        self.dims = (Dim("n", SAMPLE, lead[0]),
                     *(Dim(f"s{k}", ATTRIBUTE, lead[k]) for k in range(1, len(lead))),
                     Dim("c", ATTRIBUTE, classes))
        self.labels = {"inputs": (lead_l + ("c",), lead_l), "weights": (),
                       "outputs": ((None,),)}
        mx = Tensor(f"{self.name}.max", (*lead, classes), logits.dtype, producer=self)
        se = Tensor(f"{self.name}.sumexp", (*lead, 1), logits.dtype, producer=self)
        dlogits = Tensor(logits.grad_name, logits.shape, logits.dtype, producer=self)
        kc = len(self.dims) - 1

        def max_part(stage, degrees, color):
            rg = stage.ranges(degrees, color)
            k = color[kc]
            out = Rect(tuple(rg[l][0] for l in lead_l) + (k,),
                       tuple(rg[l][1] for l in lead_l) + (k + 1,))
            return PartSpec((stage.rect_for(logits.shape, lead_l + ("c",), rg),), (), (out,))

        def sumexp_part(stage, degrees, color):
            rg = stage.ranges(degrees, color)
            rows_lo = tuple(rg[l][0] for l in lead_l)
            rows_hi = tuple(rg[l][1] for l in lead_l)
            return PartSpec((stage.rect_for(logits.shape, lead_l + ("c",), rg),
                             Rect(rows_lo + (0,), rows_hi + (degrees[kc],))), (),
                            (Rect(rows_lo + (0,), rows_hi + (1,)),), partial=degrees[kc] > 1)

        def loss_part(stage, degrees, color):
            rg = stage.ranges(degrees, color)
            rows_lo = tuple(rg[l][0] for l in lead_l)
            rows_hi = tuple(rg[l][1] for l in lead_l)
            x = stage.rect_for(logits.shape, lead_l + ("c",), rg)
            y = Rect(rows_lo, rows_hi) if ignore is None else Rect.from_shape(labels.shape)
            return PartSpec((x, Rect(rows_lo + (0,), rows_hi + (degrees[kc],)),
                             Rect(rows_lo + (0,), rows_hi + (1,)), y),
                            (), (x, Rect((0,), (1,))),
                            partial=(False, True), info=(rg["c"], rows_lo, rows_hi))

        def max_fwd(spec, ins, ws):
            return [ins[0].amax(dim=-1, keepdim=True)]

        def sumexp_fwd(spec, ins, ws):
            x, m = ins
            m = m.amax(dim=-1, keepdim=True)
            return [torch.exp(x - m).sum(dim=-1, keepdim=True)]

        ignore = self.params.get("ignore_index")

        def bad_labels(y) -> ShapeError:
            return ShapeError(f"softmax_ce '{self.name}': labels must be in [0, {classes}); "
                              f"got values from {int(y.min())} to {int(y.max())}.")

        def loss_fwd(spec, ins, ws):
            x, m, s, y = ins
            (c0, c1), rows_lo, rows_hi = spec.info
            count, valid = self.count, None
            if ignore is not None:          # y is every label: count, then take my rows
                # on meta tensors (FLOP counting from shapes) no label is known ignored
                count = y.numel() if y.is_meta else int((y != ignore).sum())
                y = y[tuple(slice(lo, hi) for lo, hi in zip(rows_lo, rows_hi))]
                valid = (y != ignore).unsqueeze(-1)
                y = torch.where(valid.squeeze(-1), y, 0)
            if m.shape[-1] == 1 and c1 - c0 == classes:     # one part has every class
                lse = m + torch.log(s)
                idx = y.unsqueeze(-1)
                try:
                    picked = torch.gather(x, -1, idx)
                except RuntimeError:
                    raise bad_labels(y) from None
                grad = torch.exp(x - lse)
                grad.scatter_add_(-1, idx, torch.full_like(lse, -1.0))
                terms = lse - picked
                if valid is not None:
                    grad, terms = grad * valid, terms * valid
                return [grad.div_(count), terms.sum().reshape(1).div_(count)]
            if not y.is_meta and bool(((y < 0) | (y >= classes)).any()):   # one host sync
                raise bad_labels(y)
            m = m.amax(dim=-1, keepdim=True)
            lse = m + torch.log(s)
            grad = torch.exp(x - lse)
            y = y.unsqueeze(-1) - c0
            mine = (y >= 0) & (y < c1 - c0)
            if valid is not None:
                mine, grad = mine & valid, grad * valid
            idx = y.clamp(0, c1 - c0 - 1)
            picked = torch.gather(x, -1, idx)
            loss = ((lse - picked) * mine).sum().reshape(1) / count
            grad.scatter_add_(-1, idx, -mine.to(grad.dtype))
            return [grad / count, loss]

        def loss_work(stage, phase, spec, plan):
            """loss_fwd's operations: with every class in one part, 11 (15 with ignored
            labels); else 19 (23)."""
            (c0, c1), _, _ = spec.info
            whole = spec.inputs[1].shape[-1] == 1 and c1 - c0 == classes
            return PartWork(0, (11 if whole else 19) + (0 if ignore is None else 4))

        self._stages = [
            Stage(self, "max", [logits], [mx], max_fwd, part=max_part, differentiable=False,
                  work=lambda stage, phase, spec, plan: PartWork(0, 1)),    # an amax
            Stage(self, "sumexp", [logits, mx], [se], sumexp_fwd, part=sumexp_part,
                  differentiable=False,     # amax, sub, exp, sum
                  work=lambda stage, phase, spec, plan: PartWork(0, 4)),
            Stage(self, "loss", [logits, mx, se, labels], [dlogits, loss], loss_fwd,
                  part=loss_part, differentiable=False, work=loss_work),
        ]

    def stages(self):
        return self._stages

    def capture_hazard(self, spec=None) -> str | None:
        """The loss stage's part syncs with the host when labels may be ignored (it counts
        the others) or its classes are split (it checks the labels' range): then
        taskrt.executor.capture runs it eagerly. Its max and sumexp stages never do."""
        info = getattr(spec, "info", None)
        if not (isinstance(info, tuple) and len(info) == 3):
            return None                                 # not the loss stage
        (c0, c1), _, _ = info
        if self.params.get("ignore_index") is not None:
            return "cross-entropy counts the labels not ignored on the host"
        if c1 - c0 != self.inputs[0].shape[-1]:
            return "cross-entropy split on classes checks the labels' range on the host"
        return None

    def reference(self, inputs, weights):
        logits, labels = inputs
        c = logits.shape[-1]
        return [F.cross_entropy(logits.reshape(-1, c), labels.reshape(-1),
                                ignore_index=self.params.get("ignore_index", -100)).reshape(1)]


@builder
def softmax_cross_entropy(model: Model, logits: Tensor, labels: Tensor,
                          name: str | None = None, ignore_index: int | None = None) -> Tensor:
    """Mean softmax cross-entropy of logits (..., C) against integer labels (...); sets the
    model's loss. Like torch.nn.functional.cross_entropy on the flattened batch (labels
    equal to `ignore_index` count for nothing)."""
    if model.loss_op is not None:
        raise ShapeError(f"Model '{model.name}' already has a loss "
                         f"('{model.loss_op.name}'); a model has one loss.")
    op = model.add_op(SoftmaxCrossEntropy(model, logits, labels, name, ignore_index))
    model.loss_op = op
    return op.loss_tensor
