"""embedding: y[..., :] = table[indices[...], :], a lookup table like torch.nn.Embedding.

Dims: n (sample: the first index axis), s1.. (attribute: other index axes such as
sequence), d (parameter: embedding features, splits the table's columns), v (reduction:
vocabulary rows, splits the table's rows). A v-part looks up only the indices in its row
range and contributes zeros for the others, so the parts' outputs are partial sums that
the runtime adds. With `padding_idx` the gradient of that row is zero, as in torch.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .errors import ShapeError
from .model import Model, builder
from .op import PartWork, ATTRIBUTE, PARAMETER, REDUCTION, SAMPLE, Dim, Op
from .tensor import Tensor


class Embedding(Op):
    type = "embedding"

    def __init__(self, model: Model, indices: Tensor, num_embeddings: int, embedding_dim: int,
                 name: str | None = None, padding_idx: int | None = None):
        super().__init__(model.unique_name("embedding", name))
        if indices.ndim < 1:
            raise ShapeError(f"embedding '{self.name}': indices '{indices.name}' have shape "
                             f"{indices.shape}; they need at least a batch axis.")
        if not indices.dtype.startswith("int"):
            raise ShapeError(f"embedding '{self.name}': indices '{indices.name}' must be an "
                             f"integer tensor, not {indices.dtype}. Feed int64 token ids.")
        if num_embeddings < 1 or embedding_dim < 1:
            raise ShapeError(f"embedding '{self.name}': num_embeddings {num_embeddings} and "
                             f"embedding_dim {embedding_dim} must both be positive.")
        if padding_idx is not None and not -num_embeddings <= padding_idx < num_embeddings:
            raise ShapeError(f"embedding '{self.name}': padding_idx {padding_idx} is not a row "
                             f"of the {num_embeddings}-row table.")
        lead = indices.shape
        self.params = {"num_embeddings": num_embeddings, "embedding_dim": embedding_dim}
        if padding_idx is not None:
            self.params["padding_idx"] = padding_idx % num_embeddings
        self.inputs = [indices]
        model.new_weight(self, "weight", (num_embeddings, embedding_dim))
        model.new_tensor(self, (*lead, embedding_dim))
        lead_labels = ("n",) + tuple(f"s{k}" for k in range(1, len(lead)))
        self.dims = (Dim("n", SAMPLE, lead[0]),
                     *(Dim(f"s{k}", ATTRIBUTE, lead[k]) for k in range(1, len(lead))),
                     Dim("d", PARAMETER, embedding_dim), Dim("v", REDUCTION, num_embeddings))
        self.labels = {"inputs": (lead_labels,), "weights": (("v", "d"),),
                       "outputs": (lead_labels + ("d",),)}

    def capture_hazard(self, spec=None) -> str | None:
        """The index check reads the indices on the host (a sync a CUDA graph cannot
        hold): taskrt.executor.capture runs the part eagerly, so bad indices still fail."""
        return "embedding checks its indices on the host"

    def forward(self, spec, inputs, weights):
        (idx,), (w,) = inputs, weights
        v0, v1 = spec.weights[0].lo[0], spec.weights[0].hi[0]
        vocab = self.params["num_embeddings"]
        # Meta tensors (the simulator counting FLOPs from shapes) have no values to check.
        if not idx.is_meta and ((v0 == 0 and bool((idx < 0).any())) or
                                (v1 == vocab and bool((idx >= vocab).any()))):
            raise IndexError(f"embedding '{self.name}': indices must lie in [0, {vocab}) "
                             f"(got min {int(idx.min())}, max {int(idx.max())}). Check the "
                             "vocabulary size given to model.embedding.")
        pad = self.params.get("padding_idx")
        if pad is not None:
            pad = pad - v0 if v0 <= pad < v1 else None
        if v0 == 0 and v1 == vocab:
            return [F.embedding(idx, w, padding_idx=pad)]
        local = idx - v0
        mine = (local >= 0) & (local < v1 - v0)
        rows = F.embedding(local.clamp(0, v1 - v0 - 1), w, padding_idx=pad)
        return [torch.where(mine.unsqueeze(-1), rows, rows.new_zeros(()))]

    explicit_backward = True      # for parts of the whole vocabulary (autograd for v splits)

    def forward_saving(self, spec, inputs, weights):
        """forward() of a part holding the whole table's rows, saving the indices."""
        (idx,), (w,) = inputs, weights
        if idx is None or w is None or spec.weights[0].lo[0] != 0 or \
                spec.weights[0].hi[0] != self.params["num_embeddings"]:
            return None
        return self.forward(spec, inputs, weights), (idx, w.shape[0])

    def backward(self, spec, saved, output_grads, need_inputs, need_weights):
        """The table's gradient as autograd computes it (embedding_dense_backward, rows at
        padding_idx zero); indices have none."""
        idx, rows = saved
        dw = None
        if need_weights[0]:
            pad = self.params.get("padding_idx")
            dw = torch.ops.aten.embedding_dense_backward.default(
                output_grads[0], idx, rows, -1 if pad is None else pad, False)
        return [None], [dw]

    def saved_state_bytes(self, spec, input_grads, weight_grads):
        """forward_saving keeps its indices (a region): nothing besides. A part of some rows
        of the table (autograd's path) keeps what forward() makes for the backward of the
        table's rows: the clamped local indices the lookup saves and the bool mask `where`
        saves, one each per index (a frozen table's part is measured). Declared, not
        measured: the measure's first meta tensor loads torch's meta kernels, 1.2-1.4 s of
        a GPT's Megatron simulation (its vocabulary split by the tensor-parallel degree)."""
        w = spec.weights[0]
        if spec.inputs[0].empty or w.empty:
            return None
        if w.lo[0] == 0 and w.hi[0] == self.params["num_embeddings"]:
            return 0
        if not weight_grads[0]:
            return None
        n = math.prod(spec.inputs[0].shape)
        return n * getattr(torch, self.inputs[0].dtype).itemsize + n      # indices + mask

    def work(self, phase, spec, plan):
        """A part of the whole table: the lookup, or the table's gradient (one kernel
        each). A part of a split vocabulary (autograd's path): the local indices, which
        are mine (3), clamped, the lookup, a zero and the where (8); backward: where's
        derivative (a scalar zero and a where) and the table's gradient."""
        w = spec.weights[0]
        if spec.inputs[0].empty or w.empty:
            return None
        need = int(plan.need_weights[0]) if phase == "bwd" else 1
        if w.lo[0] == 0 and w.hi[0] == self.params["num_embeddings"]:
            return PartWork(0, need)
        return PartWork(0, 8 if phase == "fwd" else 3 * need)

    def reference(self, inputs, weights):
        return [F.embedding(inputs[0], weights[0], padding_idx=self.params.get("padding_idx"))]

    def init_weights(self, generator):
        w = torch.empty(self.weights[0].shape)
        torch.nn.init.normal_(w, generator=generator)
        return [w]


@builder
def embedding(model: Model, indices: Tensor, num_embeddings: int, embedding_dim: int,
              name: str | None = None, padding_idx: int | None = None) -> Tensor:
    """Rows of a (num_embeddings, embedding_dim) table picked by integer `indices` of shape
    (N, ...), giving (N, ..., embedding_dim); like torch.nn.Embedding(num_embeddings,
    embedding_dim, padding_idx)(indices)."""
    return model.add_op(Embedding(model, indices, num_embeddings, embedding_dim, name,
                                  padding_idx)).outputs[0]
