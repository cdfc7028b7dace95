"""Groups of elementwise operators fused into one (import_module does it after the walk).

Imported code often spells one elementwise function as several operations: HF's GPT-2 GELU,
0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3))), is eight operators, so eight
forward tasks and eight backward tasks, each with a region of its own. `fuse_elementwise`
replaces such a group with one `fused_elementwise` operator: its part runs the members'
own forward code in their order on its blocks (the same operations in the same order: the
same values), and backward is autograd's on that forward, as eager PyTorch computes it.

A group: elementwise operators (add, multiply, the activations, scalar_<fn>) whose inputs and
output all have one shape (no per-feature operand), such that every tensor made inside the
group is read only inside it and is not a model output; exactly one tensor leaves the group
(the last member's output, which keeps its name, so its readers see no change); the fused
operator takes the last member's name. Dims: n and
a1, a2, ... of that shape, as each member has, so every part reads the same block of every
input as it writes.
"""
from __future__ import annotations

from ..elementwise import Elementwise, axis_dims, axis_names
from ..model import Model
from ..op import Op
from .extra_ops import ScalarOp


def _member(op: Op) -> bool:
    """An elementwise operator whose inputs all have its output's shape and dtype."""
    if not isinstance(op, (Elementwise, ScalarOp)) or len(op.outputs) != 1:
        return False
    y = op.outputs[0]
    return all(t.shape == y.shape and t.dtype == y.dtype for t in op.inputs)


class FusedElementwise(Op):
    """Members' forward code run in order on one part (see the module's docstring)."""
    type = "fused_elementwise"

    def __init__(self, model: Model, members: list, inputs: list, name: str):
        super().__init__(name)
        out = members[-1].outputs[0]
        self.inputs = list(inputs)
        self.outputs = [out]
        self.members = list(members)
        # per member, where its inputs are: in the part's inputs (k < len(inputs)) or the
        # output of an earlier member (len(inputs) + its position)
        where = {id(t): k for k, t in enumerate(self.inputs)}
        self.program = []
        for j, op in enumerate(self.members):
            self.program.append((op, tuple(where[id(t)] for t in op.inputs)))
            where[id(op.outputs[0])] = len(self.inputs) + j
        self.params = {"ops": tuple((op.display_type, tuple(sorted(
            (k, repr(v)) for k, v in op.params.items()))) for op in self.members),
            "args": tuple(refs for _, refs in self.program)}
        names = axis_names(out.ndim)
        self.dims = axis_dims(out.shape)
        self.labels = {"inputs": (names,) * len(self.inputs), "weights": (),
                       "outputs": (names,)}

    def forward(self, spec, inputs, weights):
        values = list(inputs)
        for op, refs in self.program:
            values.append(op.forward(spec, [values[k] for k in refs], [])[0])
        return [values[-1]]

    def reference(self, inputs, weights):
        values = list(inputs)
        for op, refs in self.program:
            values.append(op.reference([values[k] for k in refs], [])[0])
        return [values[-1]]


def readers(model: Model) -> dict[int, list]:
    """id(tensor) -> the operators that read it (each once), in program order."""
    out: dict[int, list] = {}
    for op in model.ops:
        for t in dict.fromkeys(t for stage in op.stages() for t in stage.inputs):
            out.setdefault(id(t), []).append(op)
    return out


def _group(model: Model, sink: Op, consumers: dict, keep: set, taken: set) -> list:
    """The members of the largest group ending at `sink`, in program order."""
    group = {id(sink): sink}
    grown = True
    while grown:
        grown = False
        for op in list(group.values()):
            for t in op.inputs:
                p = t.producer
                if p is None or id(p) in group or id(p) in taken or not _member(p) \
                        or id(t) in keep:
                    continue
                if all(id(c) in group for c in consumers.get(id(t), ())):
                    group[id(p)] = p
                    grown = True
    order = {id(op): k for k, op in enumerate(model.ops)}
    return sorted(group.values(), key=lambda op: order[id(op)])


def fuse_elementwise(model: Model, keep=()) -> dict[str, list[str]]:
    """Replace every group of two or more elementwise operators with one operator (see the
    module's docstring); returns {new operator's name: the names of the members} (the last
    member's name is the new operator's). `keep`:
    tensors read after the model runs (never fused away)."""
    consumers = readers(model)
    keep = {id(t) for t in keep}
    taken: set[int] = set()
    fused = {}
    for sink in reversed(list(model.ops)):
        if id(sink) in taken or not _member(sink):
            continue
        members = _group(model, sink, consumers, keep, taken)
        if len(members) < 2:
            continue
        inside = {id(op.outputs[0]) for op in members}
        inputs = list(dict.fromkeys(t for op in members for t in op.inputs
                                    if id(t) not in inside))
        op = FusedElementwise(model, members, inputs, sink.name)   # strategies name it so
        op.check_declaration()
        sink.outputs[0].producer = op
        for m in members:
            taken.add(id(m))
            if m is not sink:
                del model.tensors[m.outputs[0].name]
        at = model.ops.index(sink)
        model.ops[at] = op
        for m in members[:-1]:
            model.ops.remove(m)
        fused[op.name] = [m.name for m in members]
    return fused
