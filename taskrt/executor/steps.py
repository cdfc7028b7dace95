"""Turning TaskGraph nodes into ready-to-call steps over an InstanceStore.

The task calling convention: `fn(ctx, *tensors)` receives, per requirement in order, a view
of the instance (R, WD, RW) or None (Red+). It returns one value per writing requirement
(WD, RW, Red+) in order, as a tuple (or a bare tensor when there is exactly one): a tensor
to store there, or None for WD/RW when it already wrote into the view in place. A Red+
value is the task's contribution; the executor adds it to the device's partial sums.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from ..errors import ExecutionError
from ..privilege import Privilege
from .instances import InstanceStore

_RED = Privilege.REDUCE_SUM


class TaskContext:
    """What a point task knows about itself; `saved` carries state to a `state_from` launch."""
    __slots__ = ("launch", "color", "device", "torch_device", "args", "saved", "source")

    def __init__(self, launch, color, device: int, torch_device: str, source=None):
        self.launch = launch
        self.color = color
        self.device = device
        self.torch_device = torch_device
        self.args = launch.args
        self.saved: Any = None
        self.source: TaskContext | None = source

    @property
    def state(self) -> Any:
        """What the paired point of `launch.state_from` saved (None if nothing)."""
        return self.source.saved if self.source is not None else None

    def take_state(self) -> Any:
        """Return the paired point's saved state and drop it (frees its memory)."""
        if self.source is None:
            return None
        s, self.source.saved = self.source.saved, None
        return s


def _fail(node, device, exc: BaseException) -> ExecutionError:
    return ExecutionError(f"{node.describe()} failed on device {device}: "
                          f"{type(exc).__name__}: {exc}")


def task_step(node, store: InstanceStore, contexts: dict) -> Callable[[], None]:
    """A callable that runs one point task and stores what it returns."""
    dev = node.device
    source = None
    if node.launch.state_from is not None:
        source = contexts.get((node.launch.state_from, node.color))
    ctx = TaskContext(node.launch, node.color, dev, store.torch_device[dev], source)
    contexts[node.launch.name, node.color] = ctx
    args = []
    # Per writing requirement: (view, mode, pieces). Mode 0 stores into the instance view;
    # mode 1 sends a Red+ contribution to its pieces: (target view, slices of the
    # contribution or None for all of it, accumulate?).
    writes = []
    for req, targets in zip(node.requirements, node.targets):
        name = req.region.name
        if req.privilege is _RED:
            args.append(None)
            pieces = []
            for piece, partial, accumulate in targets:
                buf = store.partial if partial else store.instance
                sl = None if piece == req.rect else piece.slices_within(req.rect)
                pieces.append((buf(name, dev, piece), sl, accumulate))
            writes.append((None, 1, tuple(pieces)))
        else:
            view = store.instance(name, dev, req.rect)
            args.append(view)
            if req.privilege.writes:
                writes.append((view, 0, ()))
    fn = node.launch.task
    nwrites = len(writes)

    def run() -> None:
        try:
            out = fn(ctx, *args)
            if nwrites == 0:
                return
            if nwrites == 1 and not isinstance(out, (tuple, list)):
                out = (out,)
            if out is None or len(out) != nwrites:
                raise TypeError(f"task returned {type(out).__name__}"
                                f"{'' if out is None else f' of length {len(out)}'}; expected "
                                f"{nwrites} value(s), one per WD/RW/Red+ requirement")
            for value, (view, mode, pieces) in zip(out, writes):
                if mode == 0:
                    if value is not None and value is not view:
                        view.copy_(value)
                    continue
                if value is None:
                    raise TypeError("task returned None for a Red+ requirement; return its "
                                    "contribution tensor")
                for target, sl, accumulate in pieces:
                    part = value if sl is None else value[sl]
                    if accumulate:
                        target.add_(part)
                    else:
                        target.copy_(part)
        except ExecutionError:
            raise
        except Exception as exc:
            raise _fail(node, dev, exc) from exc
    return run


def local_copy_step(node, store: InstanceStore) -> Callable[[], None]:
    """A copy whose source and destination are both owned by this process."""
    if node.reduction:
        src = (store.partial if node.from_partial else store.instance)(
            node.region.name, node.src, node.rect)
        dst = store.staging[node.id].tensor
    else:
        src = store.instance(node.region.name, node.src, node.rect)
        dst = store.instance(node.region.name, node.dst, node.rect)

    def run() -> None:
        dst.copy_(src)
    return run


def reduce_inputs(node, store: InstanceStore) -> list[tuple[tuple[slice, ...], torch.Tensor]]:
    """(slices within node.rect, source view) for each input of a ReduceNode, in order."""
    name, dev = node.region.name, node.device
    out = []
    for inp in node.inputs:
        if inp.source == "instance":
            view = store.instance(name, dev, inp.rect)
        elif inp.source == "partial":
            view = store.partial(name, dev, inp.rect)
        else:
            view = store.staging[inp.copy_id].tensor
        out.append((inp.rect.slices_within(node.rect), view))
    return out


def reduce_step(node, store: InstanceStore) -> Callable[[], None]:
    inputs = reduce_inputs(node, store)
    out = store.instance(node.region.name, node.device, node.rect)
    full = tuple(slice(0, n) for n in node.rect.shape)
    if len(inputs) == 1 and inputs[0][0] == full:
        (_, only), = inputs                     # one partial covering it all: a single copy

        def run_one() -> None:
            out.copy_(only)
        return run_one
    first_full = inputs[0][0] == full and inputs[0][1].data_ptr() != out.data_ptr()
    acc = torch.zeros_like(out)

    def run() -> None:
        if first_full:
            acc.copy_(inputs[0][1])
            rest = inputs[1:]
        else:
            acc.zero_()
            rest = inputs
        for sl, view in rest:
            acc[sl] += view
        out.copy_(acc)
    return run


def local_allreduce_step(node, store: InstanceStore) -> Callable[[], None]:
    """All-reduce among devices all owned by this process: sum in device order, copy out."""
    name = node.region.name
    parts = [(store.partial if p else store.instance)(name, d, node.rect)
             for d, p in zip(node.devices, node.in_partial)]
    outs = [store.instance(name, d, node.rect) for d in node.devices]
    acc = torch.zeros_like(outs[0])

    def run() -> None:
        acc.copy_(parts[0])
        for p in parts[1:]:
            acc.add_(p.to(acc.device, non_blocking=True) if p.device != acc.device else p)
        for o in outs:
            o.copy_(acc)
    return run
