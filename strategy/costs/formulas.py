"""A task node's work from its operator's declaration, without running anything.

Counting (work.py) runs a node's step on meta tensors: exact, but ~0.3-3 ms per new cost
key, and the first meta operation of a process imports torch's meta registrations and
torch._dynamo (~2 s). Built-in operators declare instead what that run would count
(`parallel_ops.op.Op.work` for forward and backward parts, `update_work` of an optimizer,
parallel_ops.workshape for the shared shape arithmetic); this module adds what the
executor's step does around the task function (taskrt.executor.steps: each returned value
stored into its view, a zero contribution zeroed or skipped, a Red+ contribution split
into its pieces) and returns the Work counting would give, bit for bit
(tests/strategy/test_work_formulas.py compares them over random shapes and configs).
`declared_work` returns None when the operator declares nothing for the part (a
user-written operator, a code path a formula does not cover): the node is counted.
"""
from __future__ import annotations

from parallel_ops.op import declaration_holds
from parallel_ops.tasks import StageArgs, read_task, update_task
from taskrt.privilege import Privilege

from .profile import Work

_RED = Privilege.REDUCE_SUM


def _store_traffic(node, zeros, nones) -> int:
    """Bytes the step's stores read and write, for ops with `kernel_traffic`: a copy or
    add, its target, its value and the result it returns; a zero_, its target and
    result; each of the piece's size."""
    traffic, w = 0, 0
    for req, targets in zip(node.requirements, node.targets):
        if req.privilege is not _RED and not req.privilege.writes:
            continue
        if w not in nones:
            region = req.region
            if req.privilege is not _RED:
                traffic += (2 if w in zeros else 3) * region.nbytes(req.rect)
            elif w in zeros:
                traffic += sum(2 * region.nbytes(t.piece) for t in targets
                               if not t.accumulate)
            else:
                traffic += sum(3 * region.nbytes(t.piece) for t in targets)
        w += 1
    return traffic


def _store_kernels(node, zeros, nones) -> int:
    """Kernels of the executor's step storing a task's returned values: per writing
    requirement in order, one copy (or zero_) per stored value; a Red+ contribution
    split into pieces, one add or copy per piece (a zero one: a zero_ per stored piece,
    nothing for an accumulated one)."""
    kernels, w = 0, 0
    for req, targets in zip(node.requirements, node.targets):
        if req.privilege is not _RED and not req.privilege.writes:
            continue
        if w not in nones:
            if req.privilege is not _RED:
                kernels += 1
            elif w in zeros:
                kernels += sum(1 for t in targets if not t.accumulate)
            else:
                kernels += len(targets)
        w += 1
    return kernels


def _bytes(node) -> int:
    return sum(r.region.nbytes(r.rect) for r in node.requirements)


def declared_work(node) -> Work | None:
    """The node's Work from declarations (module doc), or None to count it."""
    launch = node.launch
    args = launch.args
    if launch.task is read_task:
        return Work(0.0, _bytes(node), 0)
    if launch.task is update_task:
        declare = getattr(args, "update_work", None)
        if declare is None:
            return None
        weight, grad = node.requirements[0], node.requirements[1]
        got = declare(weight.rect.shape, weight.region.dtype, grad.region.dtype,
                      max(2, args.step_count))
        return None if got is None else Work(float(got[0]), _bytes(node), got[1])
    # A launch lowered without autograd runs `forward`, not `forward_saving`: declared for
    # stages that never have a gradient only (an evaluation forward is counted).
    if not isinstance(args, StageArgs) or not (args.grad or not args.stage.differentiable):
        return None
    stage = args.stage
    traffic = getattr(stage, "kernel_traffic", False)
    phase = launch.cost_tag[-1]
    plan = args.plan(node.color)
    if phase == "bwd" and not plan.targets:
        return Work(0.0, _bytes(node), 0)
    stage.training = args.training          # as forward_task sets it
    if not declaration_holds(stage, "work"):
        return None
    pw = stage.work(phase, plan.spec, plan)
    if pw is None:
        return None
    nbytes = _bytes(node)
    if traffic:        # as counting: the kernels' bytes when more than the parts'
        nbytes = max(nbytes, pw.traffic + _store_traffic(node, pw.zeros, pw.nones))
    return Work(float(pw.flops), nbytes, pw.kernels + _store_kernels(node, pw.zeros, pw.nones))
