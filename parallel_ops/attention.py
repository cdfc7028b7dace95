"""multihead_attention: self-attention equal to torch.nn.MultiheadAttention(batch_first=True).

Dims: n (sample), s (attribute: query positions; every part reads the keys and values of
all positions, or of positions up to its last query when causal), h (reduction over heads,
Megatron-style: a head part projects q, k and v with its heads' rows of in_proj, attends,
and multiplies by its heads' columns of out_proj, giving a partial output; only head part
0 adds out_proj's bias).

Weights are stored head-major so that one rect covers a head range: in_proj_weight as
(3, heads, head_dim, E) and in_proj_bias as (3, heads, head_dim) (torch's (3E, E) and (3E,)
reshaped), out_proj_weight as (E, heads, head_dim) (torch's (E, E) reshaped), and
out_proj_bias (E,).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from taskrt.geometry import Rect

from .errors import ShapeError
from .model import Model, builder
from .op import ATTRIBUTE, REDUCTION, SAMPLE, Dim, Op, PartSpec
from .tensor import Tensor


class MultiheadAttention(Op):
    type = "multihead_attention"
    # Its scores and probabilities (batch x heads x s x s) pass through memory several times
    # inside the part: the cost model counts its kernels' bytes (strategy/costs/work.py).
    kernel_traffic = True

    def __init__(self, model: Model, x: Tensor, num_heads: int, causal: bool = False,
                 name: str | None = None):
        super().__init__(model.unique_name("attention", name))
        if x.ndim != 3:
            raise ShapeError(f"multihead_attention '{self.name}': input '{x.name}' has shape "
                             f"{x.shape}; it needs (batch, sequence, embed_dim).")
        batch, seq, embed = x.shape
        if num_heads < 1 or embed % num_heads:
            raise ShapeError(f"multihead_attention '{self.name}': embed_dim {embed} is not "
                             f"divisible by num_heads {num_heads}. Use a divisor of {embed}.")
        hd = embed // num_heads
        self.params = {"embed_dim": embed, "num_heads": num_heads, "causal": bool(causal)}
        self.inputs = [x]
        model.new_weight(self, "in_proj_weight", (3, num_heads, hd, embed))
        model.new_weight(self, "in_proj_bias", (3, num_heads, hd))
        model.new_weight(self, "out_proj_weight", (embed, num_heads, hd))
        model.new_weight(self, "out_proj_bias", (embed,))
        model.new_tensor(self, (batch, seq, embed))
        self.dims = (Dim("n", SAMPLE, batch), Dim("s", ATTRIBUTE, seq),
                     Dim("h", REDUCTION, num_heads))
        self.labels = {"inputs": (("n", None, None),),
                       "weights": ((None, "h", None, None), (None, "h", None),
                                   (None, "h", None), (None,)),
                       "outputs": (("n", "s", None),)}

    def part(self, degrees, color) -> PartSpec:
        spec = super().part(degrees, color)
        s0, s1 = self.ranges(degrees, color)["s"]
        x = spec.inputs[0]
        if self.params["causal"] and x.hi[1] != s1:    # later keys are masked: not read
            x = Rect(x.lo, (x.hi[0], s1, x.hi[2]))
        weights = spec.weights
        if color[2] != 0:                  # out_proj's bias only in the first head part
            weights = weights[:3] + (Rect((0,), (0,)),)
        return PartSpec((x,), weights, spec.outputs, spec.partial, info=(s0, s1))

    def forward(self, spec, inputs, weights):
        (x,) = inputs
        w_in, b_in, w_out, b_out = weights
        s0, s1 = spec.info
        n, keys, embed = x.shape
        _, heads, hd, _ = w_in.shape

        def project(src, j):          # (n, L, E) -> (n, heads, L, hd) for q (0), k (1), v (2)
            y = F.linear(src, w_in[j].reshape(heads * hd, embed), b_in[j].reshape(-1))
            return y.reshape(n, src.shape[1], heads, hd).transpose(1, 2)
        q, k, v = project(x[:, s0:s1], 0), project(x, 1), project(x, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(hd)
        if self.params["causal"]:
            later = (torch.arange(s0, s1, device=x.device).unsqueeze(1)
                     < torch.arange(keys, device=x.device).unsqueeze(0))
            scores = scores.masked_fill(later, float("-inf"))
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
        ctx = ctx.transpose(1, 2).reshape(n, s1 - s0, heads * hd)
        return [F.linear(ctx, w_out.reshape(embed, heads * hd), b_out)]

    def reference(self, inputs, weights):
        (x,) = inputs
        w_in, b_in, w_out, b_out = weights
        embed, heads = self.params["embed_dim"], self.params["num_heads"]
        seq = x.shape[1]
        mask = None
        if self.params["causal"]:
            mask = torch.ones(seq, seq, dtype=torch.bool, device=x.device).triu(1)
        xt = x.transpose(0, 1)
        out, _ = F.multi_head_attention_forward(
            xt, xt, xt, embed, heads, w_in.reshape(3 * embed, embed), b_in.reshape(3 * embed),
            None, None, False, 0.0, w_out.reshape(embed, embed), b_out,
            training=self.training, need_weights=False, attn_mask=mask)
        return [out.transpose(0, 1)]

    def init_weights(self, generator):
        embed = self.params["embed_dim"]
        # torch's order: out_proj (a Linear) initializes itself when created, then
        # _reset_parameters draws in_proj_weight and zeroes both biases.
        w_out = torch.empty(embed, embed)
        torch.nn.init.kaiming_uniform_(w_out, a=math.sqrt(5), generator=generator)
        bound = 1 / math.sqrt(embed)
        torch.empty(embed).uniform_(-bound, bound, generator=generator)
        w_in = torch.empty(3 * embed, embed)
        torch.nn.init.xavier_uniform_(w_in, generator=generator)
        return [w_in.reshape(self.weights[0].shape), torch.zeros(self.weights[1].shape),
                w_out.reshape(self.weights[2].shape), torch.zeros(embed)]


@builder
def multihead_attention(model: Model, x: Tensor, num_heads: int, causal: bool = False,
                        name: str | None = None) -> Tensor:
    """Self-attention over x (N, S, E) with a causal mask if asked; like
    torch.nn.MultiheadAttention(E, num_heads, batch_first=True)(x, x, x, need_weights=False)
    (with attn_mask = the upper triangle when causal)."""
    return model.add_op(MultiheadAttention(model, x, num_heads, causal, name)).outputs[0]
