"""seq_attention: the global dot-product (Luong) attention of GNMT-style NMT.

For decoder states dec (N, Tt, H) over encoder states enc (N, Ts, H):
scores = dec enc^T, p = softmax over source positions, context = p enc, and the output
tanh(W_c [context; dec]) with W_c a bias-free Linear(2H, H).

Dims: n (sample), t (attribute: target positions; a part reads all source positions),
o (parameter: output features, splits W_c's rows; every o-part computes the attention of
its samples and target positions, then its rows of W_c).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .errors import ShapeError
from .model import Model, builder
from . import workshape
from .op import ATTRIBUTE, PARAMETER, SAMPLE, Dim, Op, PartWork
from .tensor import Tensor


class SeqAttention(Op):
    type = "seq_attention"

    def __init__(self, model: Model, dec: Tensor, enc: Tensor, name: str | None = None):
        super().__init__(model.unique_name("seq_attention", name))
        if dec.ndim != 3 or enc.ndim != 3 or dec.shape[0] != enc.shape[0] \
                or dec.shape[2] != enc.shape[2]:
            raise ShapeError(f"seq_attention '{self.name}': decoder '{dec.name}' {dec.shape} "
                             f"and encoder '{enc.name}' {enc.shape} must be (batch, target, "
                             "hidden) and (batch, source, hidden) with the same batch and "
                             "hidden sizes.")
        if dec.dtype != enc.dtype:
            raise ShapeError(f"seq_attention '{self.name}': decoder and encoder dtypes differ "
                             f"({dec.dtype} vs {enc.dtype}). Use one dtype for both.")
        batch, tgt, hid = dec.shape
        self.params = {"hidden": hid, "source": enc.shape[1]}
        self.inputs = [dec, enc]
        model.new_weight(self, "weight", (hid, 2 * hid))
        model.new_tensor(self, (batch, tgt, hid), dec.dtype)
        self.dims = (Dim("n", SAMPLE, batch), Dim("t", ATTRIBUTE, tgt),
                     Dim("o", PARAMETER, hid))
        self.labels = {"inputs": (("n", "t", None), ("n", None, None)),
                       "weights": (("o", None),), "outputs": (("n", "t", "o"),)}

    def forward(self, spec, inputs, weights):
        dec, enc = inputs
        p = torch.softmax(torch.bmm(dec, enc.transpose(1, 2)), dim=-1)
        context = torch.bmm(p, enc)
        return [torch.tanh(F.linear(torch.cat([context, dec], dim=-1), weights[0]))]

    def work(self, phase, spec, plan):
        """Forward: two bmm, the softmax, the cat, the projection (mm and its output view:
        torch's linear without a bias on 3-d input) and tanh. Backward (autograd): tanh's
        derivative, the projection's two mm, each bmm's two, softmax's derivative, and the
        sums of dec's and enc's two gradients; each product twice the forward's FLOPs.
        Parts wanting only some gradients are counted."""
        (n, tq, hid), (_, src, _) = spec.inputs[0].shape, spec.inputs[1].shape
        o = spec.weights[0].shape[0]
        flops = workshape.bmm((n, tq, hid), (n, hid, src)) + \
            workshape.bmm((n, tq, src), (n, src, hid)) + \
            workshape.mm((n * tq, 2 * hid), (2 * hid, o))
        if phase == "fwd":
            return PartWork(flops, 7)
        if not (all(plan.need_inputs) and all(plan.need_weights)):
            return None
        return PartWork(2 * flops, 10)

    def reference(self, inputs, weights):
        dec, enc = inputs
        context = F.scaled_dot_product_attention(dec, enc, enc, scale=1.0)
        return [torch.tanh(F.linear(torch.cat([context, dec], dim=-1), weights[0]))]

    def init_weights(self, generator):
        w = torch.empty(self.weights[0].shape)
        torch.nn.init.kaiming_uniform_(w, a=math.sqrt(5), generator=generator)
        return [w]


@builder
def seq_attention(model: Model, decoder_h: Tensor, encoder_h: Tensor,
                  name: str | None = None) -> Tensor:
    """Luong global attention: tanh(W_c [softmax(dec enc^T) enc; dec]) for dec (N, Tt, H)
    and enc (N, Ts, H); equals torch.tanh(torch.nn.Linear(2H, H, bias=False)(torch.cat(
    [F.scaled_dot_product_attention(dec, enc, enc, scale=1.0), dec], -1)))."""
    return model.add_op(SeqAttention(model, decoder_h, encoder_h, name)).outputs[0]
