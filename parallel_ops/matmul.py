"""bmm: batched matrix product c[..., m, n] = sum_k a[..., m, k] b[..., k, n].

Dims: b (sample: the first batch axis), b1.. (attribute: further batch axes, when the
operands have more than one), m (attribute: rows of a and c), n (attribute: columns of b
and c), k (reduction: the contracted axis; parts produce partial sums the runtime adds).
Both operands are activations: the op has no weights.
"""
from __future__ import annotations

import torch

from .errors import ShapeError
from .model import Model, builder
from .op import ATTRIBUTE, REDUCTION, SAMPLE, Dim, Op
from .tensor import Tensor


class BatchMatmul(Op):
    type = "bmm"

    def __init__(self, model: Model, a: Tensor, b: Tensor, name: str | None = None):
        super().__init__(model.unique_name("bmm", name))
        if a.ndim < 3 or a.ndim != b.ndim:
            raise ShapeError(f"bmm '{self.name}': operands '{a.name}' {a.shape} and '{b.name}' "
                             f"{b.shape} must both be (B, ..., M, K) and (B, ..., K, N) with "
                             "the same number of axes, at least 3.")
        *lead, rows, inner = a.shape
        *lead_b, inner_b, cols = b.shape
        if tuple(lead) != tuple(lead_b) or inner != inner_b:
            raise ShapeError(f"bmm '{self.name}': shapes {a.shape} and {b.shape} do not chain: "
                             f"batch axes {tuple(lead)} vs {tuple(lead_b)}, contracted axis "
                             f"{inner} vs {inner_b}. Give b the shape "
                             f"{(*lead, inner, cols)}.")
        if a.dtype != b.dtype:
            raise ShapeError(f"bmm '{self.name}': operand dtypes differ ({a.dtype} vs "
                             f"{b.dtype}). Use one dtype for both.")
        self.params = {"m": rows, "k": inner, "n": cols}
        self.inputs = [a, b]
        model.new_tensor(self, (*lead, rows, cols), a.dtype)
        lead_labels = ("b",) + tuple(f"b{j}" for j in range(1, len(lead)))
        self.dims = (Dim("b", SAMPLE, lead[0]),
                     *(Dim(f"b{j}", ATTRIBUTE, lead[j]) for j in range(1, len(lead))),
                     Dim("m", ATTRIBUTE, rows), Dim("n", ATTRIBUTE, cols),
                     Dim("k", REDUCTION, inner))
        self.labels = {"inputs": (lead_labels + ("m", "k"), lead_labels + ("k", "n")),
                       "weights": (), "outputs": (lead_labels + ("m", "n"),)}

    def forward(self, spec, inputs, weights):
        a, b = inputs
        return [torch.matmul(a, b)]

    explicit_backward = True

    def forward_saving(self, spec, inputs, weights):
        a, b = inputs
        if a is None or b is None:
            return None
        return self.forward(spec, inputs, weights), (a, b)

    def backward(self, spec, saved, output_grads, need_inputs, need_weights):
        """dA = dC B^T and dB = A^T dC, the products autograd's bmm backward takes."""
        a, b = saved
        dc = output_grads[0]
        da = torch.matmul(dc, b.transpose(-2, -1)) if need_inputs[0] else None
        db = torch.matmul(a.transpose(-2, -1), dc) if need_inputs[1] else None
        return [da, db], []

    def reference(self, inputs, weights):
        a, b = inputs
        lead = a.shape[:-2]
        c = torch.bmm(a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:]))
        return [c.reshape(*lead, *c.shape[-2:])]


@builder
def bmm(model: Model, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
    """(B, ..., M, K) x (B, ..., K, N) -> (B, ..., M, N); like torch.bmm (torch.matmul when
    there are several batch axes)."""
    return model.add_op(BatchMatmul(model, a, b, name)).outputs[0]
