"""Small operators the importer needs for PyTorch code that the built-in operators do not
cover one to one. They are ordinary custom operators (docs/custom_ops.md): labels plus a
torch function for one part.

  scalar_<fn>  y = fn(x, c) for a Python number c: add, sub, rsub (c - x), mul, div,
               rdiv (c / x), pow. Dims as elementwise: n (sample), a1.. (attribute).
  parameter    a learned tensor used directly in arithmetic (`x + self.pos`). Its one
               weight is the module's parameter in torch's shape; the output drops the
               weight's leading size-1 axes. Dims: a0, a1.. (parameter: each splits the
               weight), so by default it runs on one device.
  constant     a fixed tensor (a buffer or a folded expression) used as an activation;
               its value is a non-trainable weight. Dims as `parameter`.
  sdpa         scaled dot-product attention of q, k, v (N, H, S, D) -> (N, H, S, D),
               like F.scaled_dot_product_attention: no mask, a causal one, or a mask
               tensor (bool: True attends; float: added to the scores) broadcasting to
               (N, H, S, S); dropout on the attention weights uses parallel_ops/dropout.py's
               split-independent mask over (N, H, S, S). Dims: n (sample), h (attribute:
               heads), s (attribute: query positions; every part reads the keys and values
               of all positions, or up to its last query when causal).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from taskrt.geometry import Rect

from ..elementwise import axis_dims, axis_names
from ..dropout import keep_mask
from ..errors import ShapeError
from ..model import Model
from ..op import ATTRIBUTE, PARAMETER, SAMPLE, Dim, Op, PartSpec
from ..tensor import Tensor


def register(model: Model, op: Op) -> Op:
    """Check and initialize an op (Model.add_op)."""
    return model.add_op(op)


_SCALAR_FUNCTIONS = {
    "add": lambda x, c: torch.add(x, c),
    "sub": lambda x, c: torch.sub(x, c),
    "rsub": lambda x, c: x.__rsub__(c),
    "mul": lambda x, c: torch.mul(x, c),
    "div": lambda x, c: torch.div(x, c),
    "rdiv": lambda x, c: x.__rtruediv__(c),
    "pow": lambda x, c: torch.pow(x, c),
}


# fn -> d(fn(x, c))/dx applied to the output gradient dy, as autograd computes it
_SCALAR_DERIVATIVES = {
    "add": lambda dy, x, c: dy,
    "sub": lambda dy, x, c: dy,
    "mul": lambda dy, x, c: dy * c,
    "div": lambda dy, x, c: dy / c,
    "pow": lambda dy, x, c: torch.zeros_like(x) if c == 0 else dy * (c * x.pow(c - 1)),
}


class ScalarOp(Op):
    """y = fn(x, c) elementwise, for a Python number c."""

    def __init__(self, model: Model, x: Tensor, fn: str, c, name: str | None = None):
        super().__init__(model.unique_name(f"scalar_{fn}", name))
        if fn not in _SCALAR_FUNCTIONS:
            raise ShapeError(f"scalar op '{self.name}': unknown function '{fn}'; use one of "
                             f"{sorted(_SCALAR_FUNCTIONS)}.")
        self.type = f"scalar_{fn}"
        self.params = {"c": c}
        self.inputs = [x]
        model.new_tensor(self, x.shape, x.dtype)
        names = axis_names(x.ndim)
        self.dims = axis_dims(x.shape)
        self.labels = {"inputs": (names,), "weights": (), "outputs": (names,)}
        self._fn = _SCALAR_FUNCTIONS[fn]

    def forward(self, spec, inputs, weights):
        return [self._fn(inputs[0], self.params["c"])]

    explicit_backward = True      # for add, sub, mul, div and pow (autograd for the others)

    def forward_saving(self, spec, inputs, weights):
        fn = self.type[len("scalar_"):]
        if fn not in _SCALAR_DERIVATIVES or inputs[0] is None:
            return None
        return self.forward(spec, inputs, weights), inputs[0] if fn == "pow" else None

    def backward(self, spec, saved, output_grads, need_inputs, need_weights):
        """The derivative autograd computes (AddBackward1, SubBackward1, MulBackward1,
        DivBackward1, PowBackward0)."""
        if not need_inputs[0]:
            return [None], []
        fn = self.type[len("scalar_"):]
        return [_SCALAR_DERIVATIVES[fn](output_grads[0], saved, self.params["c"])], []

    def reference(self, inputs, weights):
        return [self._fn(inputs[0], self.params["c"])]


def _squeezed(shape) -> tuple[int, ...]:
    shape = tuple(shape)
    k = 0
    while k < len(shape) - 1 and shape[k] == 1:
        k += 1
    return shape[k:]


class _TensorValue(Op):
    """An activation whose value is this op's single weight (leading 1-axes dropped)."""

    def __init__(self, model: Model, type: str, shape, trainable: bool, name: str | None):
        super().__init__(model.unique_name(type, name))
        self.type = type
        shape = tuple(int(s) for s in shape)
        out = _squeezed(shape)
        lead = len(shape) - len(out)
        model.new_weight(self, "value", shape, trainable=trainable)
        y = model.new_tensor(self, out, model.dtype)
        y.requires_grad = trainable
        names = tuple(f"a{k}" for k in range(len(out)))
        self.dims = tuple(Dim(nm, PARAMETER, s) for nm, s in zip(names, out))
        self.labels = {"inputs": (), "weights": ((None,) * lead + names,), "outputs": (names,)}
        self.params = {"shape": shape}

    def forward(self, spec, inputs, weights):
        return [weights[0].reshape(spec.outputs[0].shape)]

    def reference(self, inputs, weights):
        return [weights[0].reshape(self.outputs[0].shape)]

    def init_weights(self, generator):
        return [torch.zeros(self.params["shape"])]


class ParameterOp(_TensorValue):
    def __init__(self, model: Model, shape, name: str | None = None):
        super().__init__(model, "parameter", shape, True, name)


class ConstantOp(_TensorValue):
    def __init__(self, model: Model, shape, name: str | None = None):
        super().__init__(model, "constant", shape, False, name)


def _bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b for (n, h, i, j) and (n, h, j, k): one bmm over n * h (torch.matmul of 4-d
    operands adds expands and reshapes around it, each an operation per call)."""
    n, h = a.shape[:2]
    return torch.bmm(a.flatten(0, 1), b.flatten(0, 1)).view(n, h, a.shape[2], b.shape[3])


_LATER_KEYS: dict = {}


def _later_keys(s0: int, s1: int, keys: int, device) -> torch.Tensor:
    """The causal mask of query rows s0..s1-1 over `keys` keys: True where a key comes
    after its query (cached: parts ask for the same ones every iteration)."""
    key = (s0, s1, keys, str(device))
    got = _LATER_KEYS.get(key)
    if got is None:
        got = _LATER_KEYS[key] = (torch.arange(keys, device=device).unsqueeze(0)
                                  > torch.arange(s0, s1, device=device).unsqueeze(1))
    return got


class SDPA(Op):
    type = "sdpa"

    def __init__(self, model: Model, q: Tensor, k: Tensor, v: Tensor, causal: bool = False,
                 scale: float | None = None, name: str | None = None,
                 mask: Tensor | None = None, dropout_p: float = 0.0):
        super().__init__(model.unique_name("sdpa", name))
        if q.ndim != 4 or k.shape != q.shape or v.shape != q.shape:
            raise ShapeError(f"sdpa '{self.name}': q {q.shape}, k {k.shape} and v {v.shape} "
                             "must all be (batch, heads, sequence, head_dim).")
        n, h, s, d = q.shape
        if mask is not None and causal:
            raise ShapeError(f"sdpa '{self.name}': give a mask or causal=True, not both.")
        if not 0.0 <= dropout_p < 1.0:
            raise ShapeError(f"sdpa '{self.name}': dropout_p={dropout_p}; use 0 <= p < 1.")
        self.model = model
        self.params = {"causal": bool(causal), "scale": scale, "dropout_p": float(dropout_p),
                       "mask": None if mask is None else mask.dtype}
        self.inputs = list(dict.fromkeys([q, k, v] + ([mask] if mask is not None else [])))
        self.args = tuple(self.inputs.index(t) for t in (q, k, v))
        self.mask_arg = None if mask is None else self.inputs.index(mask)
        model.new_tensor(self, q.shape, q.dtype)
        self.dims = (Dim("n", SAMPLE, n), Dim("h", ATTRIBUTE, h), Dim("s", ATTRIBUTE, s))
        q_lab, kv_lab = ("n", "h", "s", None), ("n", "h", None, None)
        labels = [q_lab if j == self.args[0] else kv_lab for j in range(len(self.inputs))]
        if len(set(self.args)) < 3 and self.args[0] in self.args[1:]:
            # q shares a tensor with k or v: that input must be read whole on the s axis.
            labels = [kv_lab for _ in self.inputs]
        if mask is not None:
            if mask.ndim > 4 or mask.shape[-1] != s or \
                    torch.broadcast_shapes(mask.shape, (n, h, s, s)) != (n, h, s, s):
                raise ShapeError(f"sdpa '{self.name}': mask '{mask.name}' {mask.shape} does "
                                 f"not broadcast to the scores ({n}, {h}, {s}, {s}).")
            full = ("n", "h", "s", None)[4 - mask.ndim:]
            labels[self.mask_arg] = tuple(l if size != 1 else None
                                          for l, size in zip(full, mask.shape))
        self.labels = {"inputs": tuple(labels), "weights": (), "outputs": (q_lab,)}

    def part(self, degrees, color) -> PartSpec:
        spec = super().part(degrees, color)
        s0, s1 = self.ranges(degrees, color)["s"]
        ins = []
        for j, r in enumerate(spec.inputs):
            if self.params["causal"] and j != self.mask_arg and r.lo[2] == 0 and \
                    r.hi[2] == self.inputs[0].shape[2]:
                r = Rect(r.lo, r.hi[:2] + (s1,) + r.hi[3:])   # later keys are masked out
            ins.append(r)
        return PartSpec(tuple(ins), (), spec.outputs, info=(s0, s1))

    def _attend(self, q, k, v, mask, rows: Rect):
        """softmax(q k^T * scale + mask) (dropped out) v for the query rows in `rows`:
        (output, q's rows, the probabilities, the dropped-out probabilities, the keep
        mask or None)."""
        s0, s1 = rows.lo[2], rows.hi[2]
        if q.shape[2] != s1 - s0:
            q = q[:, :, s0:s1]
        scores = _bmm(q, k.transpose(-2, -1)) * self._scale(q)
        if self.params["causal"]:
            scores = scores.masked_fill(_later_keys(s0, s1, k.shape[2], q.device),
                                        float("-inf"))
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool \
                else scores + mask
        probs = torch.softmax(scores, dim=-1)
        dropped, keep = probs, None
        p = self.params["dropout_p"]
        if p and self.training:
            n, h, s = (dim.extent for dim in self.dims)
            keep = keep_mask(self.model.seed, self.model.step_count, self.name, p,
                             (n, h, s, s), Rect(rows.lo[:3] + (0,),
                                                rows.hi[:3] + (k.shape[2],)), q.device)
            dropped = probs * keep * (1.0 / (1.0 - p))
        return _bmm(dropped, v), q, probs, dropped, keep

    def _scale(self, q) -> float:
        scale = self.params["scale"]
        return 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale

    def _rows(self, spec) -> Rect:
        s0, s1 = spec.info
        out = spec.outputs[0]
        return Rect(out.lo[:2] + (s0,), out.hi[:2] + (s1,))

    def forward(self, spec, inputs, weights):
        q, k, v = (inputs[j] for j in self.args)
        mask = None if self.mask_arg is None else inputs[self.mask_arg]
        return [self._attend(q, k, v, mask, self._rows(spec))[0]]

    # The derivatives autograd takes through _attend, without recording its graph per part
    # (an attention part is ~10 autograd nodes, and the engine's set-up per call).
    explicit_backward = True

    def forward_saving(self, spec, inputs, weights):
        """forward() without autograd, saving what backward() reads: q's rows, k, v, the
        probabilities (softmax's derivative reads them), the dropped-out ones and the keep
        mask, and the mask (an additive mask's gradient needs its shape)."""
        if any(t is None for t in inputs):
            return None
        q, k, v = (inputs[j] for j in self.args)
        mask = None if self.mask_arg is None else inputs[self.mask_arg]
        out, q_rows, probs, dropped, keep = self._attend(q, k, v, mask, self._rows(spec))
        return [out], (q_rows, k, v, mask, probs, dropped, keep)

    def backward(self, spec, saved, output_grads, need_inputs, need_weights):
        """dv = P'^T dO; dP' = dO v^T; dP = dP' * (1/(1-p)) * keep; dS = softmax's
        derivative; dq = dS * scale k, dk = (dS * scale)^T q; an additive mask gets dS summed
        to its shape. Masked-out scores need no masked_fill of dS: their probabilities are
        exactly 0, so softmax's derivative (P * (dP - sum(dP * P))) is 0 there already.
        An input given as several of q, k, v gets the sum; q read whole (it is also k or v)
        gets zeros outside the part's rows."""
        q, k, v, mask, probs, dropped, keep = saved
        dout = output_grads[0]
        grads = [None] * len(self.inputs)

        def give(j, g, rows=None):
            if not need_inputs[j]:
                return
            if rows is not None:           # q's rows of an input read whole
                whole = torch.zeros_like(v if j == self.args[2] else k)
                whole[:, :, rows[0]:rows[1]] = g
                g = whole
            grads[j] = g if grads[j] is None else grads[j] + g
        qj, kj, vj = self.args
        if need_inputs[vj]:
            give(vj, _bmm(dropped.transpose(-2, -1), dout))
        wanted = need_inputs[qj] or need_inputs[kj] or (
            self.mask_arg is not None and need_inputs[self.mask_arg])
        if wanted:
            dp = _bmm(dout, v.transpose(-2, -1))
            if keep is not None:
                dp = dp * (1.0 / (1.0 - self.params["dropout_p"])) * keep
            ds = torch._softmax_backward_data(dp, probs, -1, probs.dtype)
            if self.mask_arg is not None and need_inputs[self.mask_arg] and \
                    mask.dtype != torch.bool:
                grads[self.mask_arg] = ds.sum_to_size(mask.shape)
            ds = ds * self._scale(q)
            s0, s1 = spec.info
            sliced = (s0, s1) if qj in (kj, vj) and q.shape[2] != (
                k if qj == kj else v).shape[2] else None
            give(qj, _bmm(ds, k), sliced)
            give(kj, _bmm(ds.transpose(-2, -1), q))
        return grads, []

    def reference(self, inputs, weights):
        q, k, v = (inputs[j] for j in self.args)
        mask = None if self.mask_arg is None else inputs[self.mask_arg]
        if self.params["dropout_p"] and self.training:
            return [self._attend(q, k, v, mask, Rect.from_shape(q.shape))[0]]
        return [F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                               is_causal=self.params["causal"],
                                               scale=self.params["scale"])]
