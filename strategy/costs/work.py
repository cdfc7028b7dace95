"""The work of a task node, independent of any device: FLOPs and bytes.

FLOPs come from torch.utils.flop_counter.FlopCounterMode around the node's own executor
step (parts.node_steps) on meta tensors, which compute nothing: a forward node counts its
forward; a backward node runs its paired forward outside the counter and counts only the
backward. An operator that needs real values (a data-dependent check such as `bool(t)`)
is counted again on small-valued real CPU tensors of the same shapes. FlopCounterMode counts
matrix products, convolutions and attention; elementwise work counts zero, which leaves
such parts to the memory term of the analytic model.

Bytes are the sum of the sizes of the parts the node touches (every requirement once).
"""
from __future__ import annotations

from torch.utils.flop_counter import FlopCounterMode

from .parts import SteadyStep, node_steps
from .profile import Work


def node_bytes(node) -> int:
    """Bytes of every part the node reads or writes."""
    return sum(r.region.nbytes(r.rect) for r in node.requirements)


def _count(node, device: str, graph, int_ranges) -> int:
    fwd, step = node_steps(node, device, graph, int_ranges)
    if fwd is not None:
        fwd()
    counter = FlopCounterMode(display=False)
    with SteadyStep(node), counter:
        step()
    return counter.get_total_flops()


def node_flops(node, graph=None, int_ranges=None) -> int:
    """FLOPs of one run of the node (see the module doc)."""
    try:
        return _count(node, "meta", graph, int_ranges)
    except Exception:            # data-dependent code cannot run on meta tensors
        return _count(node, "cpu", graph, int_ranges)


def node_work(node, graph=None, int_ranges=None) -> Work:
    return Work(float(node_flops(node, graph, int_ranges)), node_bytes(node))
