"""linear: y = x W^T + b over the last axis.

Dims: n (sample: the first axis), s1.. (attribute: other leading axes such as sequence),
o (parameter: output features, splits W's rows and b), i (reduction: input features,
splits W's columns; parts produce partial sums, and only the i=0 part adds the bias).
`activation` (e.g. "relu") is applied by each part to its output (parallel_ops.activation);
it keeps i whole.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from taskrt.geometry import Rect

from .activation import (FusesActivation, activate, activate_saving, activated,
                         activation_backward, check_activation)
from .errors import ShapeError
from .model import Model, builder
from . import workshape
from .op import ATTRIBUTE, PARAMETER, REDUCTION, SAMPLE, Dim, Op, PartSpec, PartWork
from .workshape import activation_backward_kernels, activation_kernels
from .tensor import Tensor


class Linear(FusesActivation, Op):
    type = "linear"

    def __init__(self, model: Model, x: Tensor, out_features: int, bias: bool = True,
                 name: str | None = None, activation: str | None = None):
        super().__init__(model.unique_name("linear", name))
        check_activation(f"linear '{self.name}'", activation)  # before the model gets weights
        if x.ndim < 2:
            raise ShapeError(f"linear '{self.name}': input '{x.name}' has shape {x.shape}; "
                             "it needs a batch axis and a feature axis.")
        *lead, fin = x.shape
        self.params = {"in_features": fin, "out_features": out_features, "bias": bias}
        self.inputs = [x]
        model.new_weight(self, "weight", (out_features, fin))
        if bias:
            model.new_weight(self, "bias", (out_features,))
        model.new_tensor(self, (*lead, out_features))
        lead_labels = ("n",) + tuple(f"s{k}" for k in range(1, len(lead)))
        self.dims = (Dim("n", SAMPLE, lead[0]),
                     *(Dim(f"s{k}", ATTRIBUTE, lead[k]) for k in range(1, len(lead))),
                     Dim("o", PARAMETER, out_features),
                     Dim("i", REDUCTION, fin))
        self.set_activation(activation)
        self.labels = {"inputs": (lead_labels + ("i",),),
                       "weights": (("o", "i"), ("o",))[:len(self.weights)],
                       "outputs": (lead_labels + ("o",),)}

    def part(self, degrees, color) -> PartSpec:
        spec = super().part(degrees, color)
        if len(self.weights) == 2 and color[-1] != 0:      # bias only in the first i-part
            b = Rect((0,), (0,))
            spec = PartSpec(spec.inputs, (spec.weights[0], b), spec.outputs, spec.partial)
        return spec

    def forward(self, spec, inputs, weights):
        (x,) = inputs
        w, b = (weights + [None])[:2]
        return [activate(self.activation, F.linear(x, w, b))]

    explicit_backward = True

    def forward_saving(self, spec, inputs, weights):
        """forward() without autograd for a 2-d input part (one matrix product, addmm or mm),
        or a contiguous one of more axes: torch's linear flattens it to 2-d, multiplies and
        views the product back (its derivative is the 2-d one on the flattened views);
        saving what backward() needs."""
        (x,) = inputs
        w = weights[0]
        if x is None or w is None:
            return None
        lead = None
        if x.dim() != 2:
            if not x.is_contiguous():
                return None            # torch copies it (matmul's reshape): autograd's path
            lead = x.shape[:-1]
            x = x.view(-1, x.shape[-1])
        b = weights[1] if len(weights) > 1 else None
        y, act = activate_saving(self.activation, F.linear(x, w, b))
        if lead is not None:     # a view: autograd's saved output (act) sees what it sees
            y = y.view(*lead, y.shape[-1])
        return [y], (x, w, b is not None, act)

    def backward(self, spec, saved, output_grads, need_inputs, need_weights):
        """addmm's (mm's) derivatives as autograd computes them for x and W^T, in the same
        memory orders (torch's mm_mat1_backward / mm_mat2_backward), then the bias's sum;
        on the 2-d views of a flattened input (and dx viewed back to its shape)."""
        x, w, has_bias, act = saved
        dy, lead = output_grads[0], None
        if dy.dim() != 2:
            lead = dy.shape[:-1]
            dy = dy.reshape(-1, dy.shape[-1])
        dy = activation_backward(self.activation, dy, act, self)
        wt = w.t()
        dx = dw = db = None
        if need_inputs[0]:
            dx = wt.mm(dy.t()).t() if _column_major(x) else dy.mm(wt.t())
            if lead is not None:
                dx = dx.view(*lead, dx.shape[-1])
        if need_weights[0]:
            dw = (dy.t().mm(x).t() if _column_major(wt) else x.t().mm(dy)).t()
        if has_bias and need_weights[1]:
            db = dy.sum(0)
        return [dx], [dw, db]

    def work(self, phase, spec, plan):
        """forward_saving's one matrix product (addmm with the bias) and activation;
        backward's activation derivative, a product per wanted input or weight gradient,
        the bias's sum."""
        x, w = spec.inputs[0].shape, spec.weights[0].shape
        if spec.inputs[0].empty or spec.weights[0].empty:
            return None
        rows = workshape.numel(x[:-1])
        o, i = w
        if phase == "fwd":
            return PartWork(workshape.mm((rows, i), (i, o)),
                            1 + activation_kernels(self.activation))
        has_bias = len(spec.weights) > 1 and not spec.weights[1].empty
        dx, dw = plan.need_inputs[0], plan.need_weights[0]
        db = has_bias and plan.need_weights[1]
        flops = dx * workshape.mm((rows, o), (o, i)) + dw * workshape.mm((i, rows), (rows, o))
        return PartWork(flops, dx + dw + db + activation_backward_kernels(self.activation))

    def saved_state_bytes(self, spec, input_grads, weight_grads):
        """forward_saving keeps its input and weights (regions) and what the activation's
        derivative reads; an empty input or weight part takes autograd's path (measured)."""
        if not self.explicit_backward or spec.inputs[0].empty or spec.weights[0].empty:
            return None
        return workshape.activation_saved_bytes(self.activation, spec.outputs[0].shape,
                                                self.inputs[0].dtype)

    def reference(self, inputs, weights):
        y = F.linear(inputs[0], *weights)
        return [activated(self.activation, y)]

    def init_weights(self, generator):
        fout, fin = self.weights[0].shape
        w = torch.empty(fout, fin)
        torch.nn.init.kaiming_uniform_(w, a=math.sqrt(5), generator=generator)
        if len(self.weights) == 1:
            return [w]
        bound = 1 / math.sqrt(fin) if fin > 0 else 0
        b = torch.empty(fout).uniform_(-bound, bound, generator=generator)
        return [w, b]


def _column_major(m: torch.Tensor) -> bool:
    """Whether matrix m is stored column by column (autograd then transposes its products)."""
    return m.stride(0) == 1 and m.stride(1) == m.shape[0]


@builder
def linear(model: Model, x: Tensor, out_features: int, bias: bool = True,
           name: str | None = None, activation: str | None = None) -> Tensor:
    """y = x W^T + b, like torch.nn.Linear(x.shape[-1], out_features, bias), followed by
    `activation` ("relu", "gelu", "tanh", "sigmoid") when given: one operator, one launch
    (see parallel_ops/activation.py)."""
    return model.add_op(Linear(model, x, out_features, bias, name, activation)).outputs[0]
