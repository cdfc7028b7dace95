"""sdpa on heads packed side by side, and the import fold that makes it.

Imported attention (HF GPT-2, BERT, ViT) splits heads with x.view(N, S, H, D).transpose(1, 2)
for each of q, k and v and merges them back with out.transpose(1, 2).reshape(N, S, H*D):
four reshapes and four transposes, sixteen tasks an iteration with their backward, around
every attention operator. `fold_attention_heads(model)` replaces the pattern with one
`PackedSDPA`: q, k, v and the output keep the (N, S, H*D) layout of the linear layers around
them, and each part makes the (N, H, S, D) views itself. Its dims are sdpa's (n, h, s), so
strategies and dropout masks are unchanged; a block of heads is a block of the last axis in
units of D. Values are bit-equal: the parts run the same operations on the same values (the
transposed views are copied where our transpose tasks copied them, inside sdpa's bmm and
the final reshape, as eager does).

The fold needs the whole pattern: each reshape and transpose read only by the next step,
none of their tensors a model output; anything else keeps the separate operators.
"""
from __future__ import annotations

from taskrt.geometry import Rect

from ..errors import ShapeError
from ..model import Model
from ..op import ATTRIBUTE, SAMPLE, Dim, Op, PartSpec
from ..shape import Reshape, Transpose
from ..tensor import Tensor
from .extra_ops import SDPA
from .fused import readers


def _heads(t, d: int):
    """(n, s, h*d) -> the (n, h, s, d) view."""
    return t.unflatten(-1, (t.shape[-1] // d, d)).transpose(1, 2)


def _packed(t):
    """(n, h, s, d) -> (n, s, h*d) (a copy, as eager's reshape of the transposed view)."""
    return t.transpose(1, 2).reshape(t.shape[0], t.shape[2], t.shape[1] * t.shape[3])


class PackedSDPA(SDPA):
    """sdpa of q, k, v (N, S, H*D) -> (N, S, H*D) with H heads (see the module's docstring)."""

    def __init__(self, model: Model, q: Tensor, k: Tensor, v: Tensor, heads: int,
                 causal: bool = False, scale: float | None = None, name: str | None = None,
                 mask: Tensor | None = None, dropout_p: float = 0.0,
                 output: Tensor | None = None):
        Op.__init__(self, model.unique_name("sdpa", name))
        if q.ndim != 3 or k.shape != q.shape or v.shape != q.shape or q.shape[2] % heads:
            raise ShapeError(f"sdpa '{self.name}': q {q.shape}, k {k.shape} and v {v.shape} "
                             f"must all be (batch, sequence, {heads} heads x head_dim).")
        n, s, e = q.shape
        self.head_dim = e // heads
        if mask is not None and causal:
            raise ShapeError(f"sdpa '{self.name}': give a mask or causal=True, not both.")
        self.model = model
        self.params = {"causal": bool(causal), "scale": scale, "dropout_p": float(dropout_p),
                       "mask": None if mask is None else mask.dtype, "heads": heads}
        self.inputs = list(dict.fromkeys([q, k, v] + ([mask] if mask is not None else [])))
        self.args = tuple(self.inputs.index(t) for t in (q, k, v))
        self.mask_arg = None if mask is None else self.inputs.index(mask)
        if output is None:
            model.new_tensor(self, q.shape, q.dtype)
        else:
            output.producer = self
            self.outputs = [output]
        self.dims = (Dim("n", SAMPLE, n), Dim("h", ATTRIBUTE, heads), Dim("s", ATTRIBUTE, s))
        self.shared_q = len(set(self.args)) < 3 and self.args[0] in self.args[1:]
        self.labels = None                    # part() says what a part reads
        if mask is not None and (mask.ndim > 4 or mask.shape[-1] != s or any(
                size not in (1, full) for size, full in zip(mask.shape[::-1],
                                                           (s, s, heads, n)))):
            raise ShapeError(f"sdpa '{self.name}': mask '{mask.name}' {mask.shape} does "
                             f"not broadcast to the scores ({n}, {heads}, {s}, {s}).")

    def part(self, degrees, color) -> PartSpec:
        rg = self.ranges(degrees, color)
        (n0, n1), (h0, h1), (s0, s1) = rg["n"], rg["h"], rg["s"]
        d, seq = self.head_dim, self.inputs[self.args[0]].shape[1]
        rows = Rect((n0, s0, h0 * d), (n1, s1, h1 * d))
        keys = Rect((n0, 0, h0 * d), (n1, s1 if self.params["causal"] else seq, h1 * d))
        ins = []
        for j, t in enumerate(self.inputs):
            if j == self.mask_arg:
                full = ("n", "h", "s", None)[4 - t.ndim:]
                ins.append(self.rect_for(t.shape, tuple(
                    lab if size != 1 else None for lab, size in zip(full, t.shape)), rg))
            else:
                ins.append(rows if j == self.args[0] and not self.shared_q else keys)
        return PartSpec(tuple(ins), (), (rows,), info=(s0, s1))

    def _rows(self, spec) -> Rect:
        s0, s1 = spec.info
        out, d = spec.outputs[0], self.head_dim
        return Rect((out.lo[0], out.lo[2] // d, s0), (out.hi[0], out.hi[2] // d, s1))

    def _unpacked(self, inputs) -> list:
        """The part's inputs with q, k and v as (n, h, s, d) views."""
        return [t if j == self.mask_arg or t is None else _heads(t, self.head_dim)
                for j, t in enumerate(inputs)]

    def forward(self, spec, inputs, weights):
        return [_packed(SDPA.forward(self, spec, self._unpacked(inputs), weights)[0])]

    def forward_saving(self, spec, inputs, weights):
        got = SDPA.forward_saving(self, spec, self._unpacked(inputs), weights)
        if got is None:
            return None
        return [_packed(got[0][0])], got[1]

    def backward(self, spec, saved, output_grads, need_inputs, need_weights):
        dout = _heads(output_grads[0], self.head_dim)
        grads, _ = SDPA.backward(self, spec, saved, [dout], need_inputs, need_weights)
        return [g if j == self.mask_arg or g is None else _packed(g)
                for j, g in enumerate(grads)], []

    def reference(self, inputs, weights):
        return [_packed(SDPA.reference(self, self._unpacked(inputs), weights)[0])]


def _split_heads(t: Tensor, consumers: dict, keep: set):
    """(x, transpose op, reshape op, heads) when t is x.view(N, S, H, D).transpose(1, 2), each
    step read only by the next; else None."""
    tr = t.producer
    if type(tr) is not Transpose or {tr.params["d0"], tr.params["d1"]} != {1, 2} \
            or len(consumers.get(id(t), ())) != 1 or id(t) in keep:
        return None
    u = tr.inputs[0]
    rs = u.producer
    if type(rs) is not Reshape or u.ndim != 4 or consumers.get(id(u)) != [tr] \
            or id(u) in keep:
        return None
    x = rs.inputs[0]
    if x.ndim != 3 or x.shape[:2] != u.shape[:2] or x.shape[2] != u.shape[2] * u.shape[3]:
        return None
    return x, tr, rs, u.shape[2]


def _merge_heads(y: Tensor, consumers: dict, keep: set):
    """(z, transpose op, reshape op) when y is only read as
    z = y.transpose(1, 2).reshape(N, S, H*D); else None."""
    tr = next(iter(consumers.get(id(y), ())), None)
    if type(tr) is not Transpose or consumers[id(y)] != [tr] or id(y) in keep \
            or {tr.params["d0"], tr.params["d1"]} != {1, 2}:
        return None
    y2 = tr.outputs[0]
    rs = next(iter(consumers.get(id(y2), ())), None)
    if type(rs) is not Reshape or consumers[id(y2)] != [rs] or id(y2) in keep:
        return None
    z = rs.outputs[0]
    n, s, h, d = y2.shape
    return (z, tr, rs) if z.shape == (n, s, h * d) else None


def fold_attention_heads(model: Model, keep=()) -> dict[str, list[str]]:
    """Replace each attention with its heads split and merged around it by a PackedSDPA (see
    the module's docstring); returns {sdpa name: names of the operators removed}."""
    consumers = readers(model)
    keep = {id(t) for t in keep}
    folded = {}
    for op in list(model.ops):
        if type(op) is not SDPA:
            continue
        qkv = [op.inputs[j] for j in op.args]
        splits = {id(t): _split_heads(t, consumers, keep) for t in dict.fromkeys(qkv)}
        merge = _merge_heads(op.outputs[0], consumers, keep)
        heads = {sp[3] for sp in splits.values() if sp is not None}
        if merge is None or None in splits.values() or len(heads) != 1:
            continue
        z, *merge_ops = merge
        gone = [o for sp in splits.values() for o in (sp[2], sp[1])] + [op] + merge_ops
        anchor = model.ops.index(merge_ops[-1])         # the new operator goes where it was
        anchor -= sum(model.ops.index(o) < anchor for o in gone)
        for o in gone:
            model.ops.remove(o)
            if o is not merge_ops[-1]:
                del model.tensors[o.outputs[0].name]
        x = [splits[id(t)][0] for t in qkv]
        mask = None if op.mask_arg is None else op.inputs[op.mask_arg]
        p = op.params
        new = PackedSDPA(model, *x, heads.pop(), p["causal"], p["scale"], op.name, mask,
                         p["dropout_p"], output=z)
        new.check_declaration()
        model.ops.insert(anchor, new)
        folded[op.name] = [o.name for o in gone if o is not op]
    return folded
