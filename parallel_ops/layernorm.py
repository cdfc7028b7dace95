"""layernorm over the last axis, which may be split; equal to torch.nn.LayerNorm(F).

Dims: n (sample), s1.. (attribute: other leading axes), f (parameter: the normalized axis,
which splits gamma and beta). Lowered like softmax (softmax.row_stat_stages): part k of
the stats launch writes the mean and the sum of squared deviations (mean_k, M2_k) of its
piece of each row; each normalize part combines the Kc pieces of its rows with Chan's
formula, mean = sum(n_k mean_k) / F and M2 = sum(M2_k + n_k (mean_k - mean)^2), which is
exact and, unlike sums of x and x^2, keeps float32 accurate when |mean| >> std. Autograd
flows through both launches.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .errors import ShapeError
from .model import Model, builder
from .op import PARAMETER, Op, PartWork
from .softmax import row_dims, row_stat_stages, zero_stats_grad
from .tensor import Tensor


def _stats(spec, inputs, weights):
    (x,) = inputs
    mean = x.mean(dim=-1, keepdim=True)
    return [torch.stack([mean, ((x - mean) ** 2).sum(dim=-1, keepdim=True)], dim=-1)]


class LayerNorm(Op):
    type = "layernorm"

    def __init__(self, model: Model, x: Tensor, normalized_shape=None, eps: float = 1e-5,
                 elementwise_affine: bool = True, name: str | None = None):
        super().__init__(model.unique_name("layernorm", name))
        self.dims = row_dims(f"layernorm '{self.name}'", x, "f", PARAMETER)
        feat = x.shape[-1]
        if normalized_shape is not None:
            given = (normalized_shape,) if isinstance(normalized_shape, int) \
                else tuple(normalized_shape)
            if given != (feat,):
                raise ShapeError(f"layernorm '{self.name}': normalized_shape {given} for "
                                 f"'{x.name}' {x.shape}; only the last axis is supported. "
                                 f"Use normalized_shape={feat} (or reshape first).")
        self.params = {"features": feat, "eps": eps, "elementwise_affine": elementwise_affine}
        self.inputs = [x]
        if elementwise_affine:
            model.new_weight(self, "weight", (feat,))
            model.new_weight(self, "bias", (feat,))
        y = model.new_tensor(self, x.shape, x.dtype)
        self._stages = row_stat_stages(self, x, y, _stats, self._normalize, self.weights,
                                       whole_saving=self._whole_saving,
                                       whole_backward=self._whole_backward,
                                       whole_backward_kernels=lambda plan: 1,
                                       split_work=self._split_work,
                                       whole_saved_bytes=self._whole_saved_bytes)

    def _normalize(self, spec, inputs, weights):
        x, stats = inputs
        mean_k, m2_k = stats[..., 0], stats[..., 1]
        n_k = torch.tensor(spec.info, dtype=x.dtype, device=x.device)
        count = sum(spec.info)
        mean = (n_k * mean_k).sum(dim=-1, keepdim=True) / count
        m2 = (m2_k + n_k * (mean_k - mean) ** 2).sum(dim=-1, keepdim=True)
        y = (x - mean) * torch.rsqrt(m2 / count + self.params["eps"])
        if weights:
            gamma, beta = weights
            y = y * gamma + beta
        return [y]

    def _split_work(self, is_stats: bool, phase, spec, plan):
        """Kernels of a part of split rows (Op.work). Stats: mean, x - mean, its square,
        the sum, the stack; backward (autograd) 8. Normalize: _normalize's 13 (and the
        affine product and sum); backward (autograd) 22 (26 affine). Parts wanting only
        some gradients are counted."""
        affine = bool(self.params["elementwise_affine"])
        if phase == "fwd":
            return PartWork(0, 5 if is_stats else 13 + 2 * affine)
        if not (all(plan.need_inputs) and all(plan.need_weights)):
            return None
        return PartWork(0, 8 if is_stats else 22 + 4 * affine)

    def _whole_saved_bytes(self, spec) -> int:
        """What _whole_saving keeps besides regions: the part's mean and 1/std, one per row,
        in torch's accumulation type (float32, float64 for float64) as on meta and CUDA."""
        rows = math.prod(spec.inputs[0].shape[:-1])
        return 2 * rows * (8 if self.inputs[0].dtype == "float64" else 4)

    def _whole_saving(self, spec, inputs, weights):
        """Normalize of whole rows: torch's fused layer norm, saving what its derivative
        reads (the part's mean and 1/std)."""
        x = inputs[0]
        gamma, beta = weights if weights else (None, None)
        y, mean, rstd = torch.native_layer_norm(x, (x.shape[-1],), gamma, beta,
                                                self.params["eps"])
        return [y], (x, mean, rstd, gamma, beta)

    def _whole_backward(self, spec, saved, output_grads, need_inputs, need_weights):
        """torch's layer norm derivative (what autograd runs for F.layer_norm)."""
        x, mean, rstd, gamma, beta = saved
        affine = gamma is not None
        mask = [bool(need_inputs[0]), affine and bool(need_weights[0]),
                affine and bool(need_weights[1])]
        dx, dgamma, dbeta = torch.ops.aten.native_layer_norm_backward.default(
            output_grads[0], x, [x.shape[-1]], mean, rstd, gamma, beta, mask)
        return [dx, zero_stats_grad(spec, x, need_inputs[1])], \
            ([dgamma, dbeta] if affine else [])

    def stages(self):
        return self._stages

    def reference(self, inputs, weights):
        return [F.layer_norm(inputs[0], (self.params["features"],), *weights,
                             eps=self.params["eps"])]

    def init_weights(self, generator):
        if not self.params["elementwise_affine"]:
            return []
        feat = self.params["features"]
        w, b = torch.empty(feat), torch.empty(feat)
        torch.nn.init.ones_(w)
        torch.nn.init.zeros_(b)
        return [w, b]


@builder
def layernorm(model: Model, x: Tensor, normalized_shape=None, eps: float = 1e-5,
              elementwise_affine: bool = True, name: str | None = None) -> Tensor:
    """Normalize over the last axis, like torch.nn.LayerNorm(x.shape[-1], eps, affine)."""
    return model.add_op(LayerNorm(model, x, normalized_shape, eps, elementwise_affine,
                               name)).outputs[0]
