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
from . import workshape
from .op import ATTRIBUTE, REDUCTION, SAMPLE, Dim, Op, PartSpec, PartWork
from .tensor import Tensor


_ITEMSIZE = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}


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

    def saved_state_bytes(self, spec, input_grads, weight_grads):
        """Autograd's, with every gradient wanted (other parts are measured): the four
        bmm operands as torch's matmul batches them (q, k, v per head, the probabilities:
        copies, or views of storages of that size), the context copied to (n, s, E) for
        the output projection, the causal mask (bool, s x keys), and a query slice of x
        that is not contiguous (n > 1 and s < keys: linear copies it)."""
        if spec.inputs[0].empty or not (all(input_grads) and all(weight_grads)):
            return None
        n, keys, embed = spec.inputs[0].shape
        _, heads, hd, _ = spec.weights[0].shape
        s0, s1 = spec.info
        s = s1 - s0
        items = heads * hd * (n * s + 2 * n * keys + n * s) + n * heads * s * keys
        if s != keys and n > 1:
            items += n * s * embed
        mask = s * keys if self.params["causal"] else 0
        return items * getattr(torch, self.inputs[0].dtype).itemsize + mask

    def work(self, phase, spec, plan):
        """Forward: kernels, FLOPs and kernel bytes of forward() (module doc): per
        projection an addmm (for a non-contiguous query slice torch's linear copies it:
        clone, views, mm, the bias's add), per product two bmm with their output views and
        a clone and view per operand torch's matmul cannot view as a batch of matrices,
        the scaling, the causal mask (two aranges, a comparison, the fill), the softmax,
        the context's copy to (n, s, E) unless a view, and the output projection (addmm,
        or mm and its view without the bias). Backward: `_backward_work`."""
        if spec.inputs[0].empty:
            return None
        if phase == "bwd":
            return self._backward_work(spec, plan)
        n, keys, embed = spec.inputs[0].shape
        _, hp, hd, _ = spec.weights[0].shape
        s0, s1 = spec.info
        lq, p = s1 - s0, hp * hd
        it = _ITEMSIZE[self.inputs[0].dtype]
        k = t = 0
        flops = workshape.mm((n * lq, embed), (embed, p)) + \
            2 * workshape.mm((n * keys, embed), (embed, p)) + \
            workshape.bmm((n * hp, lq, hd), (n * hp, hd, keys)) + \
            workshape.bmm((n * hp, lq, keys), (n * hp, keys, hd)) + \
            workshape.mm((n * lq, p), (p, embed))
        # projections
        for rows, sliced in ((lq, True), (keys, False), (keys, False)):
            if sliced and not (n == 1 or lq == keys):
                k, t = k + 5, t + 4 * n * rows * embed + (n * rows * embed + embed * p
                                                          + n * rows * p) \
                    + 2 * n * rows * p + (2 * n * rows * p + p)
            else:
                k, t = k + 1, t + p + n * rows * embed + embed * p + n * rows * p

        def batched(shape, strides, rows, cols):     # matmul's operand as (n*hp, r, c)
            return 0 if workshape.viewable(shape, strides, (n * hp, rows, cols)) \
                else 4 * n * hp * rows * cols
        proj = lambda rows: (rows * p, hd, p, 1)      # (n, hp, rows, hd) of a projection
        scores = n * hp * lq * keys
        for extra in (batched((n, hp, lq, hd), proj(lq), lq, hd),
                      batched((n, hp, hd, keys), (keys * p, hd, 1, p), hd, keys),
                      batched((n, hp, keys, hd), proj(keys), keys, hd)):
            k, t = k + 2 * bool(extra), t + extra
        k, t = k + 4, t + (n * lq * p + n * keys * p + scores) + 2 * scores \
            + (scores + n * keys * p + n * lq * p) + 2 * n * lq * p      # bmm, views
        k, t = k + 2, t + 2 * scores + 2 * scores                       # scale, softmax
        mask = 0                # the causal mask's bytes: int64 positions, bool mask
        if self.params["causal"]:
            k, t = k + 4, t + 2 * scores
            mask = 8 * lq + 8 * keys + (8 * lq + 8 * keys + lq * keys) + lq * keys
        ctx = (n, lq, hp, hd)
        if not workshape.viewable(ctx, (hp * lq * hd, hd, lq * hd, 1), (n, lq, p)):
            k, t = k + 2, t + 4 * n * lq * p
        if len(spec.weights) > 3 and not spec.weights[3].empty:
            k, t = k + 1, t + embed + n * lq * p + p * embed + n * lq * embed
        else:
            k, t = k + 2, t + n * lq * p + p * embed + 3 * n * lq * embed
        return PartWork(flops, k, traffic=t * it + mask)

    def _backward_work(self, spec, plan):
        """What autograd runs for forward(): the output projection's two mm (and the
        bias's sum), per product two bmm (a clone and view of the context's gradient
        unless a view), the derivatives of the softmax, the mask and the scaling, per
        projection its gradient's copy to (n*L, P) unless a view, two mm and the bias's
        sum (the query slice's slice_backward when it is not all positions), the weights'
        and biases' three select_backward each, and the sums of the three gradients of x,
        in_proj_weight and in_proj_bias. Parts wanting only some gradients are counted."""
        bias = len(spec.weights) > 3 and not spec.weights[3].empty
        if not (all(plan.need_inputs) and all(plan.need_weights[:3])
                and (plan.need_weights[3] or not bias)):
            return None
        n, keys, embed = spec.inputs[0].shape
        _, hp, hd, _ = spec.weights[0].shape
        s0, s1 = spec.info
        lq, p = s1 - s0, hp * hd
        it = _ITEMSIZE[self.inputs[0].dtype]
        scores = n * hp * lq * keys
        flops = 2 * (workshape.mm((n * lq, embed), (embed, p)) +
                     2 * workshape.mm((n * keys, embed), (embed, p)) +
                     workshape.bmm((n * hp, lq, hd), (n * hp, hd, keys)) +
                     workshape.bmm((n * hp, lq, keys), (n * hp, keys, hd)) +
                     workshape.mm((n * lq, p), (p, embed)))
        k = t = 0
        if bias:                                                   # output projection
            k, t = k + 3, t + n * lq * embed + embed
        else:
            k = k + 2
        t += 2 * (n * lq * embed + embed * p + n * lq * p)
        if not workshape.viewable((n, hp, lq, hd), (lq * p, hd, p, 1), (n * hp, lq, hd)):
            k, t = k + 2, t + 4 * n * lq * p                      # the context's gradient
        k, t = k + 2, t + (n * lq * p + n * keys * p + scores) + (scores + n * lq * p
                                                                  + n * keys * p)
        k, t = k + 2, t + 3 * scores + 2 * scores                 # softmax, scaling
        mask = 0
        if self.params["causal"]:
            k, t, mask = k + 1, t + 2 * scores, lq * keys
        k, t = k + 2, t + (scores + n * keys * p + n * lq * p) * 2   # scores' bmm
        grads = ((lq, (lq * p, hd, lq * hd, 1)), (keys, (keys * p, 1, hd * keys, keys)),
                 (keys, (keys * p, hd, keys * hd, 1)))           # q, k, v as (n, L, hp, hd)
        for rows, strides in grads:
            if not workshape.viewable((n, rows, hp, hd), (hp * rows * hd,) + strides[1:],
                                      (n * rows, p)):
                k, t = k + 2, t + 4 * n * rows * p
            k, t = k + 3, t + 2 * (n * rows * p + p * embed + n * rows * embed) \
                + n * rows * p + p
        if lq != keys:
            k, t = k + 1, t + n * lq * embed + n * keys * embed       # slice_backward
        k, t = k + 6, t + 3 * 4 * p * embed + 3 * 4 * p              # select_backward
        k, t = k + 6, t + 2 * 3 * n * keys * embed + 2 * 3 * 3 * p * embed + 2 * 3 * 3 * p
        return PartWork(flops, k, traffic=t * it + mask)

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
