"""Shape operators: flat and reshape, transpose, concat and split. None has weights.

Dims (n is the sample dim, a<k> an attribute dim, named after the output axis k it splits;
split names them after its input's axes):
  reshape/flat  Ignoring size-1 axes, a reshape is a product of groups: runs of input axes
                whose product equals that of a run of output axes ((N, C, H, W) -> (N, CHW)
                has groups N -> N and C, H, W -> CHW). A part must read one rect, so only
                the first axes of a group split, in units of u = gcd(first input extent,
                first output extent): the group's dim has extent u, and its block [lo, hi)
                is rows [lo, hi) * (extent / u) of that axis on both sides, a contiguous run
                of the group on both sides. (N, S, F) -> (N*S, F) splits n in units of S
                rows; (2, 3) -> (3, 2) splits nothing.
  transpose     every output axis; its dim labels the input axis it comes from.
  concat        every output axis, the concat axis too: a part reads the pieces of the
                inputs its output range overlaps (an input it does not overlap gets an
                empty rect).
  split         every input axis; a part writes the pieces of the outputs its input range
                overlaps (an empty rect for the others).
"""
from __future__ import annotations

from math import gcd, prod
from typing import Sequence

import torch

from taskrt.geometry import Rect

from .elementwise import axis_dims, axis_names
from .errors import ShapeError
from .model import Model, builder
from .op import PartWork, ATTRIBUTE, SAMPLE, Dim, Op, PartSpec
from .tensor import Tensor


def _axis(op: str, axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise ShapeError(f"{op}: axis {axis} is out of range for a {ndim}-d tensor. Use "
                         f"an axis in [{-ndim}, {ndim - 1}].")
    return axis % ndim


def _empty(ndim: int) -> Rect:
    return Rect((0,) * ndim, (0,) * ndim)


def reshape_groups(ishape, oshape) -> list[tuple[list[int], list[int]]]:
    """The (input axes, output axes) runs of equal product, size-1 axes left out."""
    ins = [k for k, s in enumerate(ishape) if s != 1]
    outs = [k for k, s in enumerate(oshape) if s != 1]
    groups, i, o = [], 0, 0
    while i < len(ins) and o < len(outs):
        gi, go = [ins[i]], [outs[o]]
        pi, po = ishape[ins[i]], oshape[outs[o]]
        i, o = i + 1, o + 1
        while pi != po:
            if pi < po:
                gi.append(ins[i])
                pi *= ishape[ins[i]]
                i += 1
            else:
                go.append(outs[o])
                po *= oshape[outs[o]]
                o += 1
        groups.append((gi, go))
    return groups


class Reshape(Op):
    """torch.reshape (type 'reshape') or torch.flatten(x, 1) (type 'flat')."""

    def __init__(self, model: Model, x: Tensor, shape: Sequence[int], type: str = "reshape",
                 name: str | None = None):
        super().__init__(model.unique_name(type, name))
        self.type = type
        shape = tuple(int(s) for s in shape)
        numel = prod(x.shape)
        if shape.count(-1) > 1 or any(s < -1 or s == 0 for s in shape):
            raise ShapeError(f"{type} '{self.name}': shape {shape} is not valid. Give "
                             "positive sizes and at most one -1.")
        if -1 in shape:
            rest = -prod(shape)
            if rest == 0 or numel % rest:
                raise ShapeError(f"{type} '{self.name}': cannot infer the -1 of {shape} "
                                 f"for input '{x.name}' of shape {x.shape} ({numel} "
                                 "elements).")
            shape = tuple(numel // rest if s == -1 else s for s in shape)
        if prod(shape) != numel or numel == 0:
            raise ShapeError(f"{type} '{self.name}': cannot reshape '{x.name}' of shape "
                             f"{x.shape} ({numel} elements) to {shape} ({prod(shape)} "
                             f"elements). Give a shape with {numel} elements.")
        self.params = {"shape": shape}
        self.inputs = [x]
        model.new_tensor(self, shape, x.dtype)
        dims, self.units = [], []
        for gi, go in reshape_groups(x.shape, shape):
            i, o = gi[0], go[0]
            u = gcd(x.shape[i], shape[o])
            if u > 1:
                sample = i == 0 and o == 0
                dims.append(Dim("n" if sample else f"a{o}", SAMPLE if sample else ATTRIBUTE, u))
                self.units.append((i, x.shape[i] // u, o, shape[o] // u))
        self.dims = tuple(dims)
        self.labels = None

    def part(self, degrees, color) -> PartSpec:
        ishape, oshape = self.inputs[0].shape, self.outputs[0].shape
        ilo, ihi = [0] * len(ishape), list(ishape)
        olo, ohi = [0] * len(oshape), list(oshape)
        for (lo, hi), (i, ui, o, uo) in zip(self.ranges(degrees, color).values(), self.units):
            ilo[i], ihi[i], olo[o], ohi[o] = lo * ui, hi * ui, lo * uo, hi * uo
        return PartSpec((Rect(tuple(ilo), tuple(ihi)),), (), (Rect(tuple(olo), tuple(ohi)),))

    def forward(self, spec, inputs, weights):
        return [inputs[0].reshape(spec.outputs[0].shape)]

    explicit_backward = True      # autograd's: the gradient reshaped back (ViewBackward0)

    def forward_saving(self, spec, inputs, weights):
        if inputs[0] is None:
            return None
        return self.forward(spec, inputs, weights), inputs[0].shape

    def backward(self, spec, saved, output_grads, need_inputs, need_weights):
        return [output_grads[0].reshape(saved) if need_inputs[0] else None], []

    def saved_state_bytes(self, spec, input_grads, weight_grads):
        """forward_saving keeps the input part's shape alone."""
        return None if spec.inputs[0].empty else 0

    def work(self, phase, spec, plan):
        """Views both ways (a part's tensors are contiguous): no kernel."""
        return None if spec.inputs[0].empty else PartWork(0, 0)

    def reference(self, inputs, weights):
        if self.type == "flat":
            return [torch.flatten(inputs[0], 1)]
        return [torch.reshape(inputs[0], self.params["shape"])]


class Transpose(Op):
    type = "transpose"

    def __init__(self, model: Model, x: Tensor, d0: int, d1: int, name: str | None = None):
        super().__init__(model.unique_name("transpose", name))
        d0 = _axis(f"transpose '{self.name}'", d0, x.ndim)
        d1 = _axis(f"transpose '{self.name}'", d1, x.ndim)
        perm = list(range(x.ndim))
        perm[d0], perm[d1] = d1, d0
        self.params = {"d0": d0, "d1": d1}
        self.inputs = [x]
        shape = tuple(x.shape[p] for p in perm)
        model.new_tensor(self, shape, x.dtype)
        names = tuple("n" if p == 0 else f"a{k}" for k, p in enumerate(perm))
        self.dims = tuple(Dim(nm, SAMPLE if p == 0 else ATTRIBUTE, s)
                          for nm, p, s in zip(names, perm, shape))
        self.labels = {"inputs": (tuple(names[p] for p in perm),), "weights": (),
                       "outputs": (names,)}

    def forward(self, spec, inputs, weights):
        return [inputs[0].transpose(self.params["d0"], self.params["d1"])]

    explicit_backward = True      # autograd's: the gradient transposed back

    def forward_saving(self, spec, inputs, weights):
        if inputs[0] is None:
            return None
        return self.forward(spec, inputs, weights), None

    def backward(self, spec, saved, output_grads, need_inputs, need_weights):
        dy = output_grads[0]
        return [dy.transpose(self.params["d0"], self.params["d1"]) if need_inputs[0]
                else None], []

    def work(self, phase, spec, plan):
        """Views both ways: no kernel."""
        return None if spec.inputs[0].empty else PartWork(0, 0)

    def reference(self, inputs, weights):
        return [torch.transpose(inputs[0], self.params["d0"], self.params["d1"])]


class Concat(Op):
    type = "concat"

    def __init__(self, model: Model, xs: Sequence[Tensor], axis: int, name: str | None = None):
        super().__init__(model.unique_name("concat", name))
        xs = list(xs)
        if not xs:
            raise ShapeError(f"concat '{self.name}': no tensors to concatenate. Give at "
                             "least one.")
        first = xs[0]
        axis = _axis(f"concat '{self.name}'", axis, first.ndim)
        for t in xs[1:]:
            same = t.ndim == first.ndim and all(
                a == b for k, (a, b) in enumerate(zip(t.shape, first.shape)) if k != axis)
            if not same or t.dtype != first.dtype:
                raise ShapeError(f"concat '{self.name}': '{t.name}' {t.shape} {t.dtype} does "
                                 f"not fit '{first.name}' {first.shape} {first.dtype} on axis "
                                 f"{axis}. Give tensors of one dtype and equal sizes on every "
                                 "other axis.")
        # A tensor given twice is one input, read once per point (see elementwise).
        self.inputs = list(dict.fromkeys(xs))
        self.args = tuple(self.inputs.index(t) for t in xs)
        sizes = [t.shape[axis] for t in xs]
        self.offsets = [sum(sizes[:j]) for j in range(len(xs))] + [sum(sizes)]
        self.params = {"axis": axis, "sizes": tuple(sizes)}
        shape = tuple(sum(sizes) if k == axis else s for k, s in enumerate(first.shape))
        model.new_tensor(self, shape, first.dtype)
        self.dims = axis_dims(shape)
        self.labels = {"inputs": (axis_names(first.ndim),) * len(self.inputs), "weights": (),
                       "outputs": (axis_names(first.ndim),)}

    def part(self, degrees, color) -> PartSpec:
        spec = Op.part(self, degrees, color)
        axis = self.params["axis"]
        out = spec.outputs[0]
        lo, hi = out.lo[axis], out.hi[axis]
        spans = [None] * len(self.inputs)       # per input: [a, b) on the axis it must read
        info = []                               # per piece: (input, start, stop) in its rect
        for u, start, stop in zip(self.args, self.offsets, self.offsets[1:]):
            a, b = max(lo, start) - start, min(hi, stop) - start
            if a < b:
                span = spans[u] or (a, b)
                spans[u] = (min(span[0], a), max(span[1], b))
                info.append((u, a, b))
        inputs = []
        for r, span in zip(spec.inputs, spans):
            if span is None:
                inputs.append(_empty(r.ndim))
            else:
                inputs.append(Rect(r.lo[:axis] + (span[0],) + r.lo[axis + 1:],
                                   r.hi[:axis] + (span[1],) + r.hi[axis + 1:]))
        info = tuple((u, a - spans[u][0], b - spans[u][0]) for u, a, b in info)
        return PartSpec(tuple(inputs), (), spec.outputs, info=info)

    def saved_state_bytes(self, spec, input_grads, weight_grads):
        """Autograd's cat and narrow keep sizes alone."""
        return 0

    def forward(self, spec, inputs, weights):
        axis = self.params["axis"]
        return [torch.cat([inputs[u].narrow(axis, a, b - a) for u, a, b in spec.info], axis)]

    def work(self, phase, spec, plan):
        """One cat; backward: autograd's slice_backward per narrowed input it wants."""
        if phase == "fwd":
            return PartWork(0, 1)
        return PartWork(0, sum(1 for u, _, _ in spec.info if plan.need_inputs[u]))

    def reference(self, inputs, weights):
        return [torch.cat([inputs[u] for u in self.args], self.params["axis"])]


class Split(Op):
    type = "split"

    def __init__(self, model: Model, x: Tensor, sizes, axis: int, name: str | None = None):
        super().__init__(model.unique_name("split", name))
        axis = _axis(f"split '{self.name}'", axis, x.ndim)
        extent = x.shape[axis]
        if isinstance(sizes, int):
            if sizes < 1:
                raise ShapeError(f"split '{self.name}': part size {sizes} must be positive.")
            sizes = [min(sizes, extent - a) for a in range(0, extent, sizes)]
        sizes = [int(s) for s in sizes]
        if sum(sizes) != extent or any(s < 1 for s in sizes):
            raise ShapeError(f"split '{self.name}': sizes {sizes} do not split axis {axis} of "
                             f"'{x.name}' {x.shape}. Give positive sizes summing to {extent}.")
        self.params = {"axis": axis, "sizes": tuple(sizes)}
        self.offsets = [sum(sizes[:j]) for j in range(len(sizes) + 1)]
        self.inputs = [x]
        for j, s in enumerate(sizes):
            model.new_tensor(self, tuple(s if k == axis else e for k, e in enumerate(x.shape)),
                             x.dtype, suffix=f":{j}")
        self.dims = axis_dims(x.shape)
        self.labels = {"inputs": (axis_names(x.ndim),), "weights": (),
                       "outputs": (axis_names(x.ndim),) * len(sizes)}

    def part(self, degrees, color) -> PartSpec:
        spec = Op.part(self, degrees, color)
        axis = self.params["axis"]
        x = spec.inputs[0]
        lo, hi = x.lo[axis], x.hi[axis]
        outputs, info = [], []
        for start, stop in zip(self.offsets, self.offsets[1:]):
            a, b = max(lo, start), min(hi, stop)
            if a < b:
                outputs.append(Rect(x.lo[:axis] + (a - start,) + x.lo[axis + 1:],
                                    x.hi[:axis] + (b - start,) + x.hi[axis + 1:]))
                info.append((a - lo, b - lo))
            else:
                outputs.append(_empty(x.ndim))
                info.append(None)
        return PartSpec(spec.inputs, (), tuple(outputs), info=tuple(info))

    def forward(self, spec, inputs, weights):
        axis = self.params["axis"]
        return [None if s is None else inputs[0].narrow(axis, s[0], s[1] - s[0])
                for s in spec.info]

    explicit_backward = True

    def forward_saving(self, spec, inputs, weights):
        x = inputs[0]
        if x is None:
            return None
        return self.forward(spec, inputs, weights), (x.shape, x.dtype, x.device)

    def backward(self, spec, saved, output_grads, need_inputs, need_weights):
        """The part's input gradient: its outputs' gradients side by side (zeros for an
        output without one), the values autograd sums from the narrows' SliceBackward."""
        if not need_inputs[0]:
            return [None], []
        shape, dtype, device = saved
        axis = self.params["axis"]
        pieces = []
        for s, dy in zip(spec.info, output_grads):
            if s is not None:
                if dy is None:
                    size = list(shape)
                    size[axis] = s[1] - s[0]
                    dy = torch.zeros(size, dtype=dtype, device=device)
                pieces.append(dy)
        return [pieces[0] if len(pieces) == 1 else torch.cat(pieces, axis)], []

    def reference(self, inputs, weights):
        return list(torch.split(inputs[0], list(self.params["sizes"]), self.params["axis"]))


@builder
def flat(model: Model, x: Tensor, name: str | None = None) -> Tensor:
    """Flatten all but the first axis, like torch.flatten(x, 1)."""
    if x.ndim < 2:
        raise ShapeError(f"flat: input '{x.name}' has shape {x.shape}; it needs a batch axis "
                         "and at least one more.")
    return model.add_op(Reshape(model, x, (x.shape[0], prod(x.shape[1:])), "flat", name)).outputs[0]


@builder
def reshape(model: Model, x: Tensor, shape: Sequence[int], name: str | None = None) -> Tensor:
    """The same elements in a new shape (one size may be -1), like torch.reshape(x, shape)."""
    return model.add_op(Reshape(model, x, shape, "reshape", name)).outputs[0]


@builder
def transpose(model: Model, x: Tensor, d0: int, d1: int, name: str | None = None) -> Tensor:
    """Swap axes d0 and d1, like torch.transpose(x, d0, d1)."""
    return model.add_op(Transpose(model, x, d0, d1, name)).outputs[0]


@builder
def concat(model: Model, xs: Sequence[Tensor], axis: int, name: str | None = None) -> Tensor:
    """Join tensors along an axis, like torch.cat(xs, axis)."""
    return model.add_op(Concat(model, xs, axis, name)).outputs[0]


@builder
def split(model: Model, x: Tensor, sizes, axis: int = 0,
          name: str | None = None) -> list[Tensor]:
    """Cut x along an axis into parts of the given sizes (or of one size), like torch.split."""
    return list(model.add_op(Split(model, x, sizes, axis, name)).outputs)
