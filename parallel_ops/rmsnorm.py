"""rmsnorm: x / sqrt(mean(x^2 over the last axis) + eps), times a per-feature weight.

Like torch.nn.RMSNorm and the RMSNorm modules of HF Llama, Mistral and Qwen, which compute
in `compute_dtype` (HF upcasts to float32) and cast the result back before the weight:
    h = x.to(compute_dtype); h = h * rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    y = weight * h.to(x.dtype)
Dims: n (sample) and s1, s2.. (attribute: the other leading axes, e.g. sequence). The
normalized axis stays whole: a part computes whole rows, exactly as the module does.
"""
from __future__ import annotations

import torch

from .errors import ShapeError
from .model import Model, builder
from .op import ATTRIBUTE, SAMPLE, Dim, Op
from .tensor import Tensor


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float,
             compute_dtype: str | None = None) -> torch.Tensor:
    """The formula above on whole rows (what every part runs)."""
    h = x.to(getattr(torch, compute_dtype)) if compute_dtype else x
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    h = h.to(x.dtype)
    return h if weight is None else weight * h


class RMSNorm(Op):
    type = "rmsnorm"

    def __init__(self, model: Model, x: Tensor, eps: float, affine: bool = True,
                 compute_dtype: str | None = None, name: str | None = None):
        super().__init__(model.unique_name("rmsnorm", name))
        if x.ndim < 2:
            raise ShapeError(f"rmsnorm '{self.name}': input '{x.name}' {x.shape} needs a "
                             "batch axis and a feature axis.")
        if compute_dtype not in (None, "float32", "float64"):
            raise ShapeError(f"rmsnorm '{self.name}': compute_dtype {compute_dtype!r}; use "
                             "None, 'float32' or 'float64'.")
        feat = x.shape[-1]
        self.params = {"features": feat, "eps": float(eps), "affine": affine,
                       "compute_dtype": compute_dtype}
        self.inputs = [x]
        if affine:
            model.new_weight(self, "weight", (feat,))
        model.new_tensor(self, x.shape, x.dtype)
        lead = ("n",) + tuple(f"s{k}" for k in range(1, x.ndim - 1))
        self.dims = (Dim("n", SAMPLE, x.shape[0]),
                     *(Dim(f"s{k}", ATTRIBUTE, x.shape[k]) for k in range(1, x.ndim - 1)))
        self.labels = {"inputs": (lead + (None,),),
                       "weights": ((None,),) if affine else (),
                       "outputs": (lead + (None,),)}

    def forward(self, spec, inputs, weights):
        return [rms_norm(inputs[0], weights[0] if weights else None, self.params["eps"],
                         self.params["compute_dtype"])]

    def reference(self, inputs, weights):
        return self.forward(None, inputs, weights)

    def init_weights(self, generator):
        return [torch.ones(self.params["features"])] if self.params["affine"] else []


@builder
def rmsnorm(model: Model, x: Tensor, eps: float = 1e-6, affine: bool = True,
            compute_dtype: str | None = None, name: str | None = None) -> Tensor:
    """RMS normalization over the last axis (see the module docstring), like
    torch.nn.RMSNorm(x.shape[-1], eps) or HF LlamaRMSNorm (compute_dtype='float32')."""
    return model.add_op(RMSNorm(model, x, eps, affine, compute_dtype, name)).outputs[0]
