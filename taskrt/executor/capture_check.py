"""The checking capture backend (TASKRT_CUDA_GRAPHS=2): CUDA-graph capture's semantics on
any device, the CPU included, so tests can check what capture relies on without a GPU.

A segment's capture records every aten operation it runs (at the dispatcher, below
autograd, with Python numbers baked in as a CUDA graph bakes them into its kernels);
a replay runs those operations again on the same tensors (a new output is copied where the
graph's kernel would have written it) instead of the Python, after checking that every
store buffer still has the address it had at capture. Copies run as late as a second stream
may run them. A host value read per iteration, a tensor made on the host during capture,
a missing wait or a re-allocated buffer then shows on the CPU as a wrong value or an error,
as it would on a GPU. The segments and the executor's side are taskrt/executor/capture.py.
"""
from __future__ import annotations

from typing import Callable

import torch

from ..errors import ExecutionError

OFF_HINT = "turn capture off with TASKRT_CUDA_GRAPHS=0"


class CheckedReplay:
    """Capture on any device by recording aten operations and replaying them (see the
    module doc). It refuses what a CUDA graph cannot hold (an operation that syncs with the
    host) and checks the store's addresses before every replay."""
    name = "checked-replay"

    # Operations that read a tensor's values on the host, or whose output shape depends on
    # them: inside a CUDA-graph capture they fail (or would be baked in).
    SYNCS = frozenset({"_local_scalar_dense", "item", "nonzero", "masked_select", "unique",
                       "_unique", "_unique2", "unique_consecutive", "equal", "is_nonzero",
                       "allclose", "repeat_interleave", "bincount", "histc"})

    def __init__(self, store=None):
        self.store = store
        self.replays = 0

    @staticmethod
    def capturable(device: torch.device) -> bool:
        return True

    @staticmethod
    def warmup(run: Callable[[], None]) -> None:
        run()

    @staticmethod
    def copy_stream(device) -> "_DeferredCopies":
        return _DeferredCopies()

    def addresses(self) -> dict:
        """Every store buffer's storage address (what replays rely on)."""
        return {id(b): (b, None if b.tensor is None else b.tensor.data_ptr())
                for bufs in (self.store.instances, self.store.partials, self.store.staging)
                for b in bufs.values()}

    def capture(self, device, fn: Callable[[], None]):
        from torch.utils._python_dispatch import TorchDispatchMode
        syncs = self.SYNCS
        ops: list = []

        class Recorder(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                if func.__name__.split(".")[0] in syncs:
                    raise ExecutionError(
                        f"operation {func.__name__} reads a tensor's values on the host "
                        "(or has a data-dependent shape): a CUDA graph cannot capture it.")
                out = func(*args, **kwargs)
                ops.append((func, args, kwargs, out))
                return out
        before = self.addresses() if self.store is not None else {}
        with Recorder():
            fn()
        if self.store is not None:
            self._check(before, "during its capture")
        return ops, before

    def replay(self, handle) -> None:
        from torch.utils._pytree import tree_leaves
        ops, addresses = handle
        if self.store is not None:
            self._check(addresses, "after capture")
        with torch.no_grad():
            for func, args, kwargs, out in ops:
                new = func(*args, **kwargs)
                for r, n in zip(tree_leaves(out), tree_leaves(new)):
                    if not isinstance(r, torch.Tensor):
                        continue
                    if n.shape != r.shape:
                        raise ExecutionError(
                            f"replay of {func.__name__}: its output has shape "
                            f"{tuple(n.shape)}, {tuple(r.shape)} at capture; a captured "
                            "graph cannot change shapes. Build a new executor, or "
                            f"{OFF_HINT}.")
                    if n.data_ptr() != r.data_ptr() or n.stride() != r.stride():
                        r.copy_(n)        # where the graph's kernel would have written
        self.replays += 1

    @staticmethod
    def _check(addresses: dict, when: str) -> None:
        for b, address in addresses.values():
            now = None if b.tensor is None else b.tensor.data_ptr()
            if now != address:
                raise ExecutionError(
                    f"buffer of '{b.region.name}' {b.rect} on device {b.device} changed "
                    f"storage {when} (address {address} -> {now}); a captured graph would "
                    "read or write the old address. Keep storage static while captured "
                    f"(InstanceStore.make_static), or {OFF_HINT}.")


class _DeferredCopies:
    """The checking replay's copy stream: the latest a second stream may run each copy
    (in issue order, when an entry waits for it or at the segment's end), so a wait the
    graph's edges do not give shows as a wrong value on the CPU."""

    def __init__(self):
        self.queue: list = []           # (node id, step), in issue order

    def run(self, node_id: int, step) -> None:
        self.queue.append((node_id, step))

    def wait_for(self, preds) -> None:
        if self.queue:
            last = max((k for k, (i, _) in enumerate(self.queue) if i in preds), default=-1)
            ready, self.queue = self.queue[:last + 1], self.queue[last + 1:]
            for _, step in ready:
                step()

    def join(self) -> None:
        self.wait_for({i for i, _ in self.queue})
