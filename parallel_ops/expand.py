"""expand: broadcast a tensor to a larger shape, like torch.Tensor.expand.

The input's axes line up with the output's last axes (torch's rule); each input axis has
the output axis's extent or 1 (broadcast). Dims: one per output axis, n (sample) for axis
0 and a<k> (attribute) for axis k, as for elementwise operators. A part reads the input's
block of the axes it keeps and the whole (size-1) broadcast axes; the gradient of a
broadcast input is the sum over its copies: each part sums its own copies (autograd of
`expand`), and the runtime sums the parts that read the same input block.
"""
from __future__ import annotations

from typing import Sequence

from .elementwise import axis_dims, axis_names
from .errors import ShapeError
from .model import Model, builder
from .op import Op
from .tensor import Tensor


def expanded_shape(where: str, shape: Sequence[int], sizes: Sequence[int]) -> tuple[int, ...]:
    """The shape torch's `x.expand(*sizes)` gives a tensor of `shape` (-1 keeps a size)."""
    shape, sizes = tuple(shape), tuple(int(s) for s in sizes)
    lead = len(sizes) - len(shape)
    if lead < 0:
        raise ShapeError(f"{where}: {len(sizes)} sizes {sizes} for a {len(shape)}-d tensor "
                         f"{shape}. Give at least one size per axis.")
    out = []
    for k, s in enumerate(sizes):
        have = shape[k - lead] if k >= lead else None
        if s == -1:
            if have is None:
                raise ShapeError(f"{where}: size -1 for new leading axis {k} of {sizes}. "
                                 "Give new axes a positive size.")
            s = have
        if s < 1 or (have is not None and have not in (1, s)):
            raise ShapeError(f"{where}: cannot expand {shape} to {sizes}: axis {k} has "
                             f"size {have}. Only size-1 axes broadcast.")
        out.append(s)
    return tuple(out)


class Expand(Op):
    type = "expand"

    def __init__(self, model: Model, x: Tensor, sizes: Sequence[int], name: str | None = None):
        super().__init__(model.unique_name("expand", name))
        shape = expanded_shape(f"expand '{self.name}'", x.shape, sizes)
        self.params = {"shape": shape}
        self.inputs = [x]
        model.new_tensor(self, shape, x.dtype)
        names = axis_names(len(shape))
        lead = len(shape) - x.ndim
        self.dims = axis_dims(shape)
        self.labels = {"inputs": (tuple(names[lead + j] if s == shape[lead + j] else None
                                        for j, s in enumerate(x.shape)),),
                       "weights": (), "outputs": (names,)}

    def forward(self, spec, inputs, weights):
        return [inputs[0].expand(spec.outputs[0].shape).contiguous()]

    def reference(self, inputs, weights):
        return [inputs[0].expand(self.params["shape"])]


@builder
def expand(model: Model, x: Tensor, sizes: Sequence[int], name: str | None = None) -> Tensor:
    """x broadcast to `sizes` (size-1 axes repeat, new axes lead; -1 keeps a size), like
    x.expand(*sizes)."""
    return model.add_op(Expand(model, x, sizes, name)).outputs[0]
