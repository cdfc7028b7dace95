"""Turning TaskGraph nodes into ready-to-call steps over an InstanceStore.

Steps hold `View`s whose `.t` is the tensor of a rect of a buffer (re-sliced by the store
when a temporary is allocated), so a step costs no slicing per call.

The task calling convention: `fn(ctx, *tensors)` receives, per requirement in order, a view
of the instance (R, WD, RW) or None (Red+). It returns one value per writing requirement
(WD, RW, Red+) in order, as a tuple (or a bare tensor when there is exactly one): a tensor
to store there, or None for WD/RW when it already wrote into the view in place. A Red+
value is the task's contribution; the executor adds it to the device's partial sums.
Returned tensors are handed over: one that covers a whole buffer may become that buffer's
storage (no copy; taskrt.executor.instances, "Adoption"), which later writers of the region
(a Red+ accumulation, a RW task) change in place. A task must not read a tensor it returned
after such a writer; autograd's version counter reports it for saved outputs. A task
function with the attribute `fresh_outputs = True` promises never to write a WD view in
place (it returns the value, or None to leave it unwritten): the local executor may then
give it None for a WD view whose buffer has no storage yet (InstanceStore.make_light).
A task function with `unread(args, color)` (the indices of read requirements whose views
it never reads: they only order it) may get None for those (InstanceStore.make_light).
"""
from __future__ import annotations

import functools
import operator
from typing import Any, Callable, NamedTuple

import torch

from ..errors import ExecutionError
from ..privilege import Privilege
from ..liveness import INSTANCE, PARTIAL
from ..taskgraph import TASK
from .instances import TORCH_DTYPES, InstanceStore, View
from .zeros import is_zero

_RED = Privilege.REDUCE_SUM


def view_of(store, partial: bool, name: str, device: int, rect) -> View:
    """A View of `rect` of the instance (or partial-sum buffer) of `name` on `device`. Stores
    without views (the cost model's stand-in store) give fixed tensors."""
    view = getattr(store, "view", None)
    if view is not None:
        return view(PARTIAL if partial else INSTANCE, name, device, rect)
    return View(None, (store.partial if partial else store.instance)(name, device, rect))


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


def whole_buffer(store, partial: bool, name: str, device: int, rect):
    """The instance (or partial-sum) Buffer of `name` on `device` if `rect` is all of it (a
    task's output for it may become its storage: Buffer.adopt), else None."""
    buf = getattr(store, "partials" if partial else "instances", {}).get((name, device))
    return buf if buf is not None and buf.rect == rect else None


def _fail(node, device, exc: BaseException) -> ExecutionError:
    return ExecutionError(f"{node.describe()} failed on device {device}: "
                          f"{type(exc).__name__}: {exc}")


def _context(node, store, contexts: dict) -> TaskContext:
    """The node's TaskContext, registered for launches that take state from it."""
    source = None
    if node.launch.state_from is not None:
        source = contexts.get((node.launch.state_from, node.color))
    ctx = TaskContext(node.launch, node.color, node.device, store.torch_device[node.device],
                      source)
    contexts[node.launch.name, node.color] = ctx
    return ctx


_NO_VIEW = View(None)                 # the argument of a Red+ requirement: None
_tensor_of = operator.attrgetter("t")
_STORE, _CONTRIBUTE, _SPLIT = 0, 1, 2  # kinds of write (see task_step)


class _Piece(NamedTuple):
    """Where one piece of a Red+ contribution goes (a ReduceTarget, resolved to views)."""
    view: View                  # the target's view
    slices: tuple | None        # of the contribution; None for all of it
    accumulate: bool            # added onto the view (else stored)
    whole: Any                  # the Buffer that may adopt the contribution, or None


def task_step(node, store: InstanceStore, contexts: dict) -> Callable[[], None]:
    """A callable that runs one point task and stores what it returns."""
    dev = node.device
    ctx = _context(node, store, contexts)
    args = []
    # Per writing requirement (kind, view, buffer, pieces):
    #   _STORE       store into the instance view (buffer: the Buffer when the view is all
    #                of it, to adopt the value; else None);
    #   _CONTRIBUTE  a Red+ contribution that is a single piece covering the requirement,
    #                not accumulated: adopted by the buffer (if whole) or copied into view;
    #   _SPLIT       any other Red+ contribution: its _Pieces.
    writes = []
    # Per writing requirement, the indices of the read arguments whose buffer it may view
    # (taskrt.liveness.alias_sources); stores without the rule view nothing.
    may_view = getattr(store, "alias_sources", {}).get(node.id, {})
    for j, (req, targets) in enumerate(zip(node.requirements, node.targets)):
        name = req.region.name
        if req.privilege is _RED:
            args.append(_NO_VIEW)
            pieces = []
            for t in targets:
                sl = None if t.piece == req.rect else t.piece.slices_within(req.rect)
                whole = whole_buffer(store, t.partial, name, dev, t.piece) \
                    if sl is None and not t.accumulate else None
                pieces.append(_Piece(view_of(store, t.partial, name, dev, t.piece), sl,
                                     t.accumulate, whole))
            first = pieces[0]
            if len(pieces) == 1 and first.slices is None and not first.accumulate:
                writes.append((_CONTRIBUTE, first.view, first.whole, j))
            else:
                writes.append((_SPLIT, None, None, tuple(pieces)))
        else:
            view = view_of(store, False, name, dev, req.rect)
            args.append(view)
            if req.privilege.writes:
                writes.append((_STORE, view, whole_buffer(store, False, name, dev, req.rect),
                               j))
    # The 4th field of _STORE and _CONTRIBUTE, the requirement's index so far, becomes the
    # views of the arguments its value may be a view of and be kept as (empty: copy it).
    for w, (kind, view, buf, j) in enumerate(writes):
        if kind != _SPLIT:
            writes[w] = (kind, view, buf, () if buf is None else
                         tuple(args[k] for k in may_view.get(j, ())))
    fn = node.launch.task
    # The task function bound to this point (`bind`: its look-ups done once), a callable of
    # the views only.
    bind = getattr(fn, "bind", None)
    call = bind(ctx) if bind is not None else functools.partial(fn, ctx)
    nwrites = len(writes)
    if nwrites == 1 and writes[0][0] != _SPLIT:
        return _one_write_step(node, dev, call, args, *writes[0])
    if nwrites > 1 and all(w[0] != _SPLIT for w in writes):
        return _whole_writes_step(node, dev, call, args, writes)

    def run() -> None:
        try:
            out = call(*map(_tensor_of, args))
            if nwrites == 0:
                return
            if nwrites == 1 and not isinstance(out, (tuple, list)):
                out = (out,)
            if out is None or len(out) != nwrites:
                raise TypeError(f"task returned {type(out).__name__}"
                                f"{'' if out is None else f' of length {len(out)}'}; expected "
                                f"{nwrites} value(s), one per WD/RW/Red+ requirement")
            for value, (kind, view, buf, pieces) in zip(out, writes):
                if kind == _STORE:
                    if value is None or value is view.t:
                        if view.t is None:          # left unwritten: storage as before
                            buf.ensure()
                        continue
                    _keep(value, view, buf, pieces)
                    continue
                if value is None:
                    raise TypeError(_NONE_FOR_RED)
                if kind == _CONTRIBUTE:
                    _keep(value, view, buf, pieces)
                    continue
                zero = is_zero(value)           # taskrt.executor.zeros: nothing to add
                for target, sl, accumulate, whole in pieces:
                    if zero:
                        if not accumulate:
                            target.t.zero_()
                        continue
                    part = value if sl is None else value[sl]
                    if accumulate:
                        target.t.add_(part)
                    elif whole is None or not whole.adopt(part):
                        target.t.copy_(part)
        except ExecutionError:
            raise
        except Exception as exc:
            raise _fail(node, dev, exc) from exc
    return run


def _one_write_step(node, dev, call, args, kind, view, buf, sources) -> Callable[[], None]:
    """task_step's run() for the commonest task: one writing requirement, stored whole
    (a forward part's output, an elementwise backward's input gradient). The same handling
    as the general run(), with less Python per call (no loop over writes)."""
    store = kind == _STORE

    def run() -> None:
        try:
            value = call(*map(_tensor_of, args))
            if isinstance(value, (tuple, list)):
                if len(value) != 1:
                    raise TypeError(f"task returned {type(value).__name__} of length "
                                    f"{len(value)}; expected 1 value(s), one per WD/RW/Red+ "
                                    "requirement")
                value = value[0]
            if value is None:
                _left_unwritten(store, view, buf)
                return
            if store and value is view.t:
                return
            if buf is None or not buf.adopt(value):     # _keep, its common case inlined
                _keep_unadopted(value, view, buf, sources)
        except ExecutionError:
            raise
        except Exception as exc:
            raise _fail(node, dev, exc) from exc
    return run


def _whole_writes_step(node, dev, call, args, writes) -> Callable[[], None]:
    """task_step's run() for a task with several writing requirements, each stored whole
    (no piece accumulated or split: a backward part's input and weight gradients). The same
    handling as the general run(), with the per-write decisions taken once."""
    nwrites = len(writes)
    # per write: (store?, view, buffer, sources)
    plan = tuple((kind == _STORE, view, buf, sources) for kind, view, buf, sources in writes)

    def run() -> None:
        try:
            out = call(*map(_tensor_of, args))
            if out is None or len(out) != nwrites:
                raise TypeError(f"task returned {type(out).__name__}"
                                f"{'' if out is None else f' of length {len(out)}'}; expected "
                                f"{nwrites} value(s), one per WD/RW/Red+ requirement")
            for value, (store, view, buf, sources) in zip(out, plan):
                if value is None:
                    _left_unwritten(store, view, buf)
                elif (not store or value is not view.t) and (buf is None
                                                             or not buf.adopt(value)):
                    _keep_unadopted(value, view, buf, sources)
        except ExecutionError:
            raise
        except Exception as exc:
            raise _fail(node, dev, exc) from exc
    return run


def _left_unwritten(store: bool, view, buf) -> None:
    """A task returned None for a write: fine for a STORE (the buffer keeps its storage, made
    if it had none), an error for a Red+ contribution."""
    if not store:
        raise TypeError(_NONE_FOR_RED)
    if view.t is None:
        buf.ensure()


_NONE_FOR_RED = ("task returned None for a Red+ requirement; return its contribution tensor "
                 "(an op's own backward() must give every gradient need_inputs / "
                 "need_weights ask for)")


def _keep(value: torch.Tensor, view, buf, sources) -> None:
    """Keep a task's value for its requirement: as the buffer's storage (adopted), as a view
    of an argument it views (`sources`), or else copied into the view (a light buffer left
    without storage gets it first)."""
    if buf is None or not buf.adopt(value):
        _keep_unadopted(value, view, buf, sources)


def _keep_unadopted(value: torch.Tensor, view, buf, sources) -> None:
    """_keep for a value the buffer did not adopt."""
    if not (sources and _viewed(value, sources) and buf.alias(value)):
        if view.t is None:
            buf.ensure()
        _store(view.t, value)


def _store(target: torch.Tensor, value: torch.Tensor) -> None:
    """Copy a task's value into the target view (zero_() for a zero contribution)."""
    if is_zero(value):
        target.zero_()
    else:
        target.copy_(value)


def _viewed(value: torch.Tensor, sources) -> bool:
    """Whether `value` shares storage with one of the argument views `sources`."""
    address = value.untyped_storage().data_ptr()
    for v in sources:
        t = v.t
        if t is not None and t.untyped_storage().data_ptr() == address:
            return True
    return False


def idle(node) -> bool:
    """Whether a task node does nothing: no region requirements, and its task function's
    `idle(args, color)` (optional) says so. Nothing reads what it would keep either (a
    paired point of the same part is idle too). The executors skip such nodes except when
    tracing (which times every node)."""
    check = getattr(node.launch.task, "idle", None) if node.kind is TASK else None
    return check is not None and not node.requirements and check(node.launch.args, node.color)


def nothing() -> None:
    """The step of an idle node."""


def batchable(node) -> bool:
    """Whether a task node may run in a batch (taskrt.launch: IndexLaunch.batch)."""
    return node.kind is TASK and node.launch.batch is not None and not any(
        r.privilege is _RED for r in node.requirements)


def batch_key(node):
    """Batchable nodes with equal keys may run in batches (one per device)."""
    return node.launch.batch, id(node.launch.args)


def plan_entries(nodes, preds, ids, traced: bool = False) -> list:
    """The node ids `ids` (in run order) as entries, each one node or a batch: a run of
    consecutive batchable nodes with one batch key and no edge among them (every
    predecessor before the run's first: they may run in any order, one batch per device).
    Untraced, idle points are left out; `traced`: every node alone. The LocalExecutor's
    plan (all of a graph's ids), and the simulator's of an untraced run's batches
    (strategy/untraced.py, per process)."""
    ids = list(ids)
    out, k = [], 0
    while k < len(ids):
        i = ids[k]
        if not traced and idle(nodes[i]):
            k += 1
            continue
        m = k + 1
        if not traced and batchable(nodes[i]):
            key = batch_key(nodes[i])
            while (m < len(ids) and batchable(nodes[ids[m]])
                   and batch_key(nodes[ids[m]]) == key and all(p < i for p in preds[ids[m]])):
                m += 1
        out.append(ids[k:m])
        k = m
    return out


class BatchMember:
    """One batchable point task, ready to join a batch: its node, batch_key, context and
    views."""
    __slots__ = ("node", "key", "ctx", "views")

    def __init__(self, node, store: InstanceStore, contexts: dict):
        self.node = node
        self.key = batch_key(node)
        # The node's own context where its single step made it (a later launch may take
        # state from it).
        self.ctx = contexts.get((node.launch.name, node.color)) or _context(node, store,
                                                                             contexts)
        self.views = [view_of(store, False, r.region.name, node.device, r.rect)
                      for r in node.requirements]


def run_batch(members: list) -> None:
    """Run point tasks of one batch_key and one device with one call of their `batch`."""
    nodes = [m.node for m in members]
    try:
        nodes[0].launch.batch([m.ctx for m in members], [[v.t for v in m.views]
                                                         for m in members])
    except ExecutionError:
        raise
    except Exception as exc:
        names = ", ".join(n.launch.name for n in nodes[:3])
        more = f" and {len(nodes) - 3} more" if len(nodes) > 3 else ""
        raise ExecutionError(f"batch of {len(nodes)} tasks ({names}{more}) failed on "
                             f"device {nodes[0].device}: {type(exc).__name__}: "
                             f"{exc}") from exc


def run_batches(members: list) -> None:
    """Run point tasks of one batch_key (no edge among them) as one batch per device."""
    per_device: dict[int, list] = {}
    for m in members:
        per_device.setdefault(m.node.device, []).append(m)
    for group in per_device.values():
        run_batch(group)


def batches_step(nodes, store: InstanceStore, contexts: dict) -> Callable[[], None]:
    """A callable that runs the point tasks of `nodes` (batchable, one batch_key, no edge
    among them) as one batch per device."""
    members = [BatchMember(n, store, contexts) for n in nodes]
    if len({n.device for n in nodes}) == 1:
        return functools.partial(run_batch, members)
    return functools.partial(run_batches, members)


def local_copy_step(node, store: InstanceStore) -> Callable[[], None]:
    """A copy whose source and destination are both owned by this process."""
    name = node.region.name
    if node.reduction:
        src = view_of(store, node.from_partial, name, node.src, node.rect)
        dst = store.staging_view(node.id)
    else:
        src = view_of(store, False, name, node.src, node.rect)
        dst = view_of(store, False, name, node.dst, node.rect)

    def run() -> None:
        dst.t.copy_(src.t)
    return run


def reduce_inputs(node, store: InstanceStore) -> list[tuple[tuple[slice, ...], View]]:
    """(slices within node.rect, source view) for each input of a ReduceNode, in order."""
    name, dev = node.region.name, node.device
    out = []
    for inp in node.inputs:
        if inp.source == "staged":
            view = store.staging_view(inp.copy_id)
        else:
            view = view_of(store, inp.source == "partial", name, dev, inp.rect)
        out.append((inp.rect.slices_within(node.rect), view))
    return out


def reduce_step(node, store: InstanceStore) -> Callable[[], None]:
    inputs = reduce_inputs(node, store)
    out = view_of(store, False, node.region.name, node.device, node.rect)
    full = tuple(slice(0, n) for n in node.rect.shape)
    if len(inputs) == 1 and inputs[0][0] == full:
        (_, only), = inputs                     # one partial covering it all: a single copy

        def run_one() -> None:
            out.t.copy_(only.t)
        return run_one
    # The first input can start the sum when it covers the rect and is not `out` itself.
    first_full = inputs[0][0] == full and node.inputs[0].source != "instance"
    acc = torch.zeros(node.rect.shape, dtype=TORCH_DTYPES[node.region.dtype],
                      device=store.torch_device[node.device])

    def run() -> None:
        if first_full:
            acc.copy_(inputs[0][1].t)
            rest = inputs[1:]
        else:
            acc.zero_()
            rest = inputs
        for sl, view in rest:
            acc[sl] += view.t
        out.t.copy_(acc)
    return run


def local_allreduce_step(node, store: InstanceStore) -> Callable[[], None]:
    """All-reduce among devices all owned by this process: sum in device order, copy out."""
    name = node.region.name
    parts = [view_of(store, p, name, d, node.rect) for d, p in zip(node.devices, node.in_partial)]
    outs = [view_of(store, False, name, d, node.rect) for d in node.devices]
    acc = torch.zeros(node.rect.shape, dtype=TORCH_DTYPES[node.region.dtype],
                      device=store.torch_device[node.devices[0]])

    def run() -> None:
        acc.copy_(parts[0].t)
        for p in parts[1:]:
            p = p.t
            acc.add_(p.to(acc.device, non_blocking=True) if p.device != acc.device else p)
        for o in outs:
            o.t.copy_(acc)
    return run
