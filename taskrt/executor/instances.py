"""Physical instances: the device buffers a TaskGraph runs on.

Each (region, device) gets one buffer covering the bounding rect of every rect used there;
Red+ requirements get a second buffer of partial sums; each reduction copy gets a staging
buffer. Persistent buffers (taskrt.liveness: initial data and regions kept for reading after
the run) are allocated once. Temporaries are allocated when their first user on the device
starts (`begin`) and released after their last user is done (`end`), counted down per
iteration, so any order of running nodes is correct. Steps hold `View`s: a view's tensor is
sliced once per allocation of its buffer, not per use. On CPU released buffers go to a free
list by exact size and are reused (no fresh page faults every iteration); on CUDA the caching
allocator does that.

Adoption: a task's output that covers a whole buffer becomes that buffer's storage instead of
being copied into it (`Buffer.adopt`), as eager PyTorch keeps an operator's output: no copy,
and autograd's saved output and the instance are one tensor, not two. Only a contiguous
tensor that owns its whole storage, which no buffer of the store holds, is adopted; two
buffers share memory only as views (below).

Views: where taskrt.liveness.alias_sources allows it (nothing writes either buffer after the
task), a task's output that is a contiguous view of a buffer it read becomes the written
buffer's storage (`Buffer.alias`) instead of a copy. The viewed storage is then *lent*:
released, it is not put on the free list (the view may outlive its owner), and no buffer
adopts it while a view holds it (`borrowed`, by storage address).
"""
from __future__ import annotations

from dataclasses import replace

import torch

from ..errors import ExecutionError
from ..geometry import Rect
from ..settings import Settings
from .cpumemory import retain_freed_memory
from ..liveness import (INSTANCE, PARTIAL, STAGING, STATE, Liveness, alias_sources,
                        is_temporary, own_bytes)
from ..privilege import Privilege
from ..taskgraph import COPY, TASK

TORCH_DTYPES = {name: getattr(torch, name) for name in
                ("float16", "bfloat16", "float32", "float64", "int8", "uint8", "int16",
                 "int32", "int64", "bool")}


# Buffer.light: a small buffer liveness keeps persistent that the LocalExecutor releases after
# its last use anyway: allocated before its first user (LIGHT_ALLOCATE), or left without
# storage until its first user returns a value for all of it to adopt (LIGHT_LAZY).
LIGHT_ALLOCATE, LIGHT_LAZY = 1, 2


class View:
    """A rect of a buffer; `t` is its tensor while the buffer is allocated (else None).
    `slices` within the buffer, None for all of it (no slicing: a view costs microseconds)."""
    __slots__ = ("slices", "t")

    def __init__(self, slices, t=None):
        self.slices, self.t = slices, t


class SavedState:
    """A point task's saved state (taskrt.liveness, kind STATE): held by the task context
    (autograd's graph), not by the store, which only counts its bytes from its first user
    to its last, as it does a temporary's (`tensor` is set while counted)."""
    __slots__ = ("device", "nbytes", "users", "remaining", "tensor", "region")
    on_cpu = False
    light = 0

    def __init__(self, device: int, nbytes: int):
        self.device, self.nbytes, self.region = device, nbytes, None
        self.users = self.remaining = 0
        self.tensor = None

    def detach(self) -> None:
        self.tensor = None


class Buffer:
    """One tensor holding `rect` of a region on one device (persistent or temporary).
    `owners` maps the storage address of every allocated buffer of the store to it."""
    __slots__ = ("region", "rect", "device", "torch_device", "dtype", "numel", "nbytes",
                 "temporary", "tensor", "flat", "sliced_for", "shaped", "views", "users",
                 "remaining", "on_cpu", "size_key", "owners", "address", "device_obj",
                 "spare", "borrowed", "borrow", "lent", "light", "size")

    def __init__(self, region, rect: Rect, device: int, torch_device: str, temporary: bool,
                 owners: dict, borrowed: dict | None = None):
        self.region, self.rect, self.device = region, rect, device
        self.torch_device = torch_device
        self.device_obj = torch.device(torch_device)
        self.owners, self.address = owners, None
        # borrowed: storage address -> how many buffers view it (shared by the store);
        # borrow: the address this buffer views (Buffer.alias); lent: its own storage is
        # viewed by another buffer, so it must not go to the free list when released.
        self.borrowed, self.borrow, self.lent = ({} if borrowed is None else borrowed), \
            None, False
        self.spare = None         # a temporary's own storage, displaced by an adopted one
        self.dtype = TORCH_DTYPES[region.dtype]
        self.numel = rect.volume
        self.nbytes = region.nbytes(rect)
        self.temporary = temporary
        # LIGHT_* when an executor drops the storage after the buffer's last use although it
        # is persistent to liveness (small: see InstanceStore.make_light), else 0.
        self.light = 0
        self.size = torch.Size(rect.shape)
        self.on_cpu = self.device_obj.type == "cpu"
        self.size_key = (torch_device, self.dtype, self.numel)      # free-list class
        self.views: dict[Rect, View] = {}
        self.users = self.remaining = 0
        self.tensor = self.flat = self.sliced_for = self.shaped = None
        if not temporary:
            self.attach(torch.zeros(self.numel, dtype=self.dtype, device=torch_device))

    def view(self, rect: Rect) -> View:
        v = self.views.get(rect)
        if v is None:
            v = self.views[rect] = View(None if rect == self.rect
                                        else rect.slices_within(self.rect))
            if self.tensor is not None:
                v.t = self.tensor if v.slices is None else self.tensor[v.slices]
        return v

    def attach(self, flat: torch.Tensor, shaped: torch.Tensor | None = None) -> None:
        """Give the buffer its storage (`shaped`: the same, already of the rect's shape);
        views are re-sliced only for new storage."""
        self._own(flat.data_ptr() if self.numel else None)
        self.flat = flat
        if self.sliced_for is not flat:
            self.sliced_for = flat
            self.shaped = shaped = flat.view(self.rect.shape) if shaped is None else shaped
            for v in self.views.values():
                v.t = shaped if v.slices is None else shaped[v.slices]
        self.tensor = self.shaped

    def _own(self, address) -> None:
        if self.borrow is not None:
            left = self.borrowed[self.borrow] - 1
            if left:
                self.borrowed[self.borrow] = left
            else:
                del self.borrowed[self.borrow]
            self.borrow = None
        if self.address is not None:
            del self.owners[self.address]
        self.address = address
        if address is not None:
            self.owners[address] = self

    def adopt(self, value: torch.Tensor) -> bool:
        """Make `value` (a task's output for the whole buffer) the buffer's storage, instead
        of copying it in; False (nothing changed) unless the buffer is allocated and `value`
        is a contiguous tensor of the buffer's shape, dtype and device, not requiring grad,
        that owns its whole storage and shares it with no buffer of the store. (What attach()
        does, with the checks' results reused: this runs for most task outputs, so it makes
        the fewest tensor calls: a contiguous tensor of the buffer's shape and dtype whose
        storage has the buffer's bytes starts at offset 0, so that needs no call.)"""
        if ((self.tensor is None and self.light != LIGHT_LAZY) or value.requires_grad
                or value.dtype is not self.dtype or value.shape != self.size
                or not value.is_contiguous()
                or not (value.is_cpu if self.on_cpu else value.device == self.device_obj)):
            return False
        storage = value.untyped_storage()
        address = storage.data_ptr()
        owners = self.owners
        if storage.nbytes() != self.nbytes or address in owners or address in self.borrowed:
            return False
        if self.temporary and self.spare is None:
            self.spare = self.flat
        if self.borrow is None and self.numel:      # _own(address), inlined: the common case
            if self.address is not None:
                del owners[self.address]
            self.address = address
            owners[address] = self
        else:
            self._own(address if self.numel else None)
        # never reused as a flat buffer (see detach)
        self.flat = self.sliced_for = self.shaped = self.tensor = value
        for v in self.views.values():
            v.t = value if v.slices is None else value[v.slices]
        return True

    def alias(self, value: torch.Tensor) -> bool:
        """Make `value`, a contiguous view of another buffer's storage (taskrt.liveness:
        alias_sources says which and when), this buffer's storage instead of copying it;
        False (nothing changed) unless the buffer is allocated and `value` has its shape,
        dtype and device and does not require grad."""
        if ((self.tensor is None and self.light != LIGHT_LAZY) or value.requires_grad
                or value.dtype != self.dtype or value.shape != self.size
                or not value.is_contiguous() or value.device != self.device_obj):
            return False
        address = value.untyped_storage().data_ptr()
        owner = self.owners.get(address)
        if owner is self:
            return False
        if owner is not None and owner.spare is None:
            owner.lent = True                   # its own storage: keep it off the free list
        if self.temporary and self.spare is None:
            self.spare = self.flat
        self._own(None)
        self.borrow = address
        self.borrowed[address] = self.borrowed.get(address, 0) + 1
        self.flat = self.sliced_for = self.shaped = self.tensor = value
        for v in self.views.values():
            v.t = value if v.slices is None else value[v.slices]
        return True

    def ensure(self) -> None:
        """Give a light buffer left without storage (LIGHT_LAZY) storage of its own."""
        if self.tensor is None:
            self.attach(torch.empty(self.numel, dtype=self.dtype, device=self.torch_device))

    def drop(self) -> None:
        """Drop a light buffer's storage after its last use: an adopted tensor goes back to
        the allocator at once (malloc hands it to the next tensor of that size while it is
        still in cache, as eager PyTorch frees a gradient after its last use)."""
        if self.borrow is None:                     # _own(None), inlined
            if self.address is not None:
                del self.owners[self.address]
                self.address = None
        else:
            self._own(None)
        self.flat = self.tensor = self.shaped = self.sliced_for = None
        for v in self.views.values():
            v.t = None
        self.lent = False

    def detach(self) -> torch.Tensor | None:
        """Drop the storage; returns the one to reuse: the buffer's own, never an adopted
        one (autograd may still hold that as a saved output) nor one a view holds (None)."""
        self._own(None)
        flat, self.flat, self.tensor = self.flat, None, None
        adopted = self.spare is not None
        if adopted:
            flat, self.spare = self.spare, None
        elif self.lent:
            flat = None
        if adopted or self.lent or not self.on_cpu:  # views must not keep memory alive
            self.sliced_for = self.shaped = None
            for v in self.views.values():
                v.t = None
        self.lent = False
        return flat


class StaticBuffer(Buffer):
    """A buffer whose storage never changes once made (InstanceStore.make_static): what
    CUDA-graph capture needs, since a captured graph reads and writes fixed addresses. A
    task's output is copied into it (no adoption, no view of another buffer); new storage
    for it is an error, never a silent re-allocation."""
    __slots__ = ()

    def adopt(self, value: torch.Tensor) -> bool:
        return False

    def alias(self, value: torch.Tensor) -> bool:
        return False

    def attach(self, flat: torch.Tensor, shaped: torch.Tensor | None = None) -> None:
        if flat is not self.flat:
            raise ExecutionError(
                f"buffer of '{self.region.name}' {self.rect} on device {self.device}: new "
                "storage for a buffer whose address a captured CUDA graph holds (static "
                "storage, taskrt/executor/capture.py). Build a new executor for a changed "
                "graph, or turn capture off (TASKRT_CUDA_GRAPHS=0).")
        Buffer.attach(self, flat, shaped)

    def drop(self) -> None:
        self.attach(None)


class InstanceStore:
    """The buffers of the devices one process owns. keep: see taskrt.liveness.resolve_keep
    ("all" frees nothing). settings: taskrt.settings (resolved here when None: a bad TASKRT_*
    value stops here, named)."""

    def __init__(self, graph, device_ids, keep="all", settings: Settings | None = None):
        self.settings = settings = Settings.resolve(settings)
        self.graph, self.keep = graph, keep
        machine = graph.machine
        self.owned = set(device_ids)
        # The countdown (begin/end) is right in any order of running nodes (MPI); an
        # executor running in a fixed order may instead begin() before a temporary's first
        # user and release() after its last.
        self.torch_device = {d: machine.devices[d].torch_device for d in self.owned}
        if any(torch.device(t).type == "cpu" for t in self.torch_device.values()):
            retain_freed_memory(settings.cpu_retain_bytes)
        self.liveness = Liveness.of(graph, keep, self.owned, settings)
        # task id -> write requirement -> read requirements it may view (Buffer.alias)
        self.alias_sources = alias_sources(graph)
        self.kept = self.liveness.kept
        self.instances: dict[tuple[str, int], Buffer] = {}
        self.partials: dict[tuple[str, int], Buffer] = {}
        self.staging: dict[int, Buffer] = {}
        self.states: dict[tuple, SavedState] = {}      # taskrt.liveness STATE key -> it
        owners: dict[int, Buffer] = {}          # storage address -> the buffer using it
        borrowed: dict[int, int] = {}           # storage address -> buffers viewing it
        for kind, rects, bufs in ((INSTANCE, graph.instance_rects, self.instances),
                                  (PARTIAL, graph.partial_rects, self.partials)):
            for (name, dev), rect in rects.items():
                if dev in self.owned:
                    region = graph.regions[name]
                    bufs[name, dev] = Buffer(region, rect, dev, self.torch_device[dev],
                                             is_temporary(name, region.nbytes(rect), self.kept, settings),
                                             owners, borrowed)
        for node in graph.nodes:
            if node.kind is COPY and node.reduction and node.dst in self.owned:
                self.staging[node.id] = Buffer(node.region, node.rect, node.dst,
                                               self.torch_device[node.dst],
                                               is_temporary(node.region.name, node.nbytes,
                                                            self.kept, settings), owners,
                                               borrowed)
        # Per node id: the temporaries it uses on owned devices.
        self.node_temps: dict[int, tuple[Buffer, ...]] = {}
        self.temporaries: list[Buffer] = []
        for key, users in zip(self.liveness.keys, self.liveness.users):
            buf = self.buffer(key)
            buf.users = len(users)
            self.temporaries.append(buf)
            for i in users:
                self.node_temps[i] = self.node_temps.get(i, ()) + (buf,)
        # CPU free list: (device, dtype, numel) -> {id(flat): flat}
        self._free: dict[tuple, dict[int, torch.Tensor]] = {}
        self.live = {d: 0 for d in self.owned}
        for bufs in (self.instances, self.partials, self.staging):
            for b in bufs.values():
                if not b.temporary:
                    self.live[b.device] += b.nbytes
        self.peak: dict[int, int] | None = None
        self.static = False           # make_static

    def make_light(self) -> list[tuple[Buffer, int, int]]:
        """Mark the buffers that liveness keeps persistent only for being small (their
        region is not kept) light, for an executor that runs nodes in a fixed order and so
        knows their first and last user: [(buffer, first user's id, last user's id)]. It
        begin()s and release()s them like temporaries: released, a light buffer drops its
        storage (Buffer.drop: no free list, no countdown, no bytes counted: liveness's and
        the memory model's answers are unchanged, an upper bound); a buffer whose first user
        writes all of it from what it returns (`_writes_whole`: a gradient, an output of a
        `fresh_outputs` task function) gets no storage before it (LIGHT_LAZY: the value is
        adopted, or copied into storage made then)."""
        if not self.settings.min_temporary_bytes:
            return []
        every = Liveness.of(self.graph, self.keep, self.owned,
                            replace(self.settings, min_temporary_bytes=0))
        out = []
        for key, users in zip(every.keys, every.users):
            if key[0] not in (INSTANCE, PARTIAL):
                continue
            b = self.buffer(key)
            if b.temporary or b.light:
                continue
            lazy = _writes_whole(self.graph.nodes[users[0]], key, b.rect)
            b.light = LIGHT_LAZY if lazy else LIGHT_ALLOCATE
            out.append((b, users[0], _last_use(self.graph.nodes, users, key[1])))
        return out

    def make_static(self) -> None:
        """Give every buffer storage of its own for good (StaticBuffer): temporaries are
        allocated now and never released, nothing is adopted or viewed, so every tensor a
        step touches keeps its address from iteration to iteration (CUDA-graph capture,
        taskrt/executor/capture.py). Costs memory: the peak is then every buffer at once
        (liveness's savings are given up; saved states, which the task contexts hold, are
        no longer counted)."""
        for bufs in (self.instances, self.partials, self.staging):
            for b in bufs.values():
                if b.tensor is None:
                    b.attach(torch.zeros(b.numel, dtype=b.dtype, device=b.torch_device))
                    self.live[b.device] += b.nbytes
                b.temporary, b.light, b.spare = False, 0, None
                b.__class__ = StaticBuffer
        self.temporaries = []
        self.node_temps = {}
        self.static = True

    def buffer(self, key) -> Buffer:
        kind, name, dev, copy = key
        if kind == STAGING:
            return self.staging[copy.id]
        if kind == STATE:
            b = self.states.get(key)
            if b is None:
                b = self.states[key] = SavedState(dev, own_bytes(key))
            return b
        return (self.instances if kind == INSTANCE else self.partials)[name, dev]

    def view(self, kind: int, name: str, device: int, rect: Rect) -> View:
        return (self.instances if kind == INSTANCE else self.partials)[name, device].view(rect)

    def staging_view(self, copy_id: int) -> View:
        b = self.staging[copy_id]
        return b.view(b.rect)

    def check_readable(self, name: str) -> None:
        """Raise unless region `name` persists after a run (it is not a temporary)."""
        if name not in self.kept:
            raise ExecutionError(
                f"read '{name}': it is a temporary, freed after its last use in the "
                f"iteration. To read it after run(), keep it: pass keep=['{name}'] (or "
                "keep='all') to the executor, or to Trainer / model.compile.")

    def _tensor(self, bufs, name: str, device: int, rect: Rect) -> torch.Tensor:
        b = bufs[name, device]
        if b.tensor is None:
            self.check_readable(name)
            raise ExecutionError(f"'{name}' on device {device} is not allocated outside the "
                                 "run that uses it.")
        return b.tensor if rect == b.rect else b.tensor[rect.slices_within(b.rect)]

    def instance(self, region_name: str, device: int, rect: Rect) -> torch.Tensor:
        return self._tensor(self.instances, region_name, device, rect)

    def partial(self, region_name: str, device: int, rect: Rect) -> torch.Tensor:
        return self._tensor(self.partials, region_name, device, rect)

    # -- temporaries ---------------------------------------------------------------------
    def start_iteration(self) -> None:
        """Reset the countdowns (releasing what a failed run left allocated) and the peak."""
        for b in self.temporaries:
            if b.tensor is not None:
                self._release(b)
            b.remaining = b.users
        self.peak = dict(self.live)

    def begin(self, temps) -> None:
        """Node about to run: allocate the temporaries it uses that are not yet allocated."""
        for b in temps:
            if b.tensor is None:
                if b.light:                        # make_light: not counted, no free list
                    if b.light == LIGHT_ALLOCATE:
                        b.attach(torch.empty(b.numel, dtype=b.dtype, device=b.torch_device))
                    continue
                if b.region is None:               # a SavedState: counted, not allocated
                    b.tensor = True
                elif flats := self._free.get(b.size_key):
                    # Its storage of last time if free (so its views stand: with the same
                    # order every iteration, every buffer gets its own back), else any.
                    mine = b.sliced_for
                    flat = flats.pop(id(mine), None) if mine is not None else None
                    b.attach(flat if flat is not None else flats.popitem()[1])
                else:
                    b.attach(torch.empty(b.numel, dtype=b.dtype, device=b.torch_device))
                live = self.live[b.device] = self.live[b.device] + b.nbytes
                if live > self.peak[b.device]:
                    self.peak[b.device] = live

    def end(self, temps) -> None:
        """Node done: release the temporaries of which it was the last user."""
        for b in temps:
            b.remaining -= 1
            if b.remaining == 0:
                self._release(b)

    def release(self, temps) -> None:
        """Release temporaries whose last user is done (for an executor that knows it)."""
        for b in temps:
            if b.light:
                b.drop()
                continue
            b.remaining = 0
            self._release(b)

    def _release(self, b: Buffer) -> None:
        flat = b.detach()
        self.live[b.device] -= b.nbytes
        if b.on_cpu and flat is not None:
            self._free.setdefault(b.size_key, {})[id(flat)] = flat

    def free_list_bytes(self) -> int:
        """Bytes held for reuse by the CPU free list (not live, but not returned either)."""
        return sum(t.numel() * t.element_size() for ts in self._free.values()
                   for t in ts.values())

    def bytes_per_device(self) -> dict[int, int]:
        """Peak bytes live per device over the last run (persistent buffers included);
        before the first run, the peak of running the nodes one at a time in id order."""
        if self.peak is not None:
            return dict(self.peak)
        out = {d: 0 for d in self.owned}
        out.update(self.liveness.peak_in_id_order())
        return out


def _last_use(nodes, users, name: str) -> int:
    """The last of a buffer's `users` (node ids in order; the first writes it) that uses
    its data. A task's read requirements that its task function's `unread(args, color)`
    names (indices) only order the task: its data comes from elsewhere (a backward part's
    saved inputs, which autograd or the op's saved state holds), so the light buffer may be
    dropped before, and the task then gets None for it."""
    for i in reversed(users[1:]):
        node = nodes[i]
        unread = getattr(node.launch.task, "unread", None) if node.kind is TASK else None
        if unread is None:
            return i
        skip = unread(node.launch.args, node.color)
        if any(req.region.name == name and not (req.privilege is Privilege.READ and k in skip)
               for k, req in enumerate(node.requirements)):
            return i
    return users[0]


def _writes_whole(node, key, rect) -> bool:
    """Whether task `node` uses buffer `key` (of `rect`) only to write all of it from the
    value it returns, so that it needs no storage before: a Red+ contribution that is
    stored, not added (task_step's _CONTRIBUTE write; the task gets None for it), or a WD
    requirement of a task function that never writes its views in place and says so
    (`fresh_outputs`: it returns the value, or None to leave it unwritten)."""
    if node.kind is not TASK:
        return False
    kind, name = key[0], key[1]
    fresh = getattr(node.launch.task, "fresh_outputs", False)
    found = False
    for req, targets in zip(node.requirements, node.targets):
        if req.region.name != name:
            continue
        if req.privilege is Privilege.WRITE_DISCARD and fresh and kind == INSTANCE \
                and req.rect == rect:
            found = True
            continue
        if req.privilege is not Privilege.REDUCE_SUM or len(targets) != 1:
            return False
        t = targets[0]
        if t.partial != (kind == PARTIAL) or t.accumulate or t.piece != req.rect \
                or t.piece != rect:
            return False
        found = True
    return found
