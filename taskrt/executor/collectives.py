"""This rank's all-reduces under MPI: local sums, gradient buckets, non-blocking collectives.

An all-reduce node first sums the contributions of this rank's devices (`start`). Nodes
whose group has one rank are then done. The others wait in their bucket
(taskrt/executor/buckets.py: the same buckets on every rank, of at most Settings.bucket_bytes):
each member's sum lands in its slice of the bucket's flat host buffer (directly on CPU; on a
GPU through a non-blocking device-to-host copy whose event is awaited strictly first in,
first out, so that collectives never start out of order),
and when every member is there, one non-blocking MPI all-reduce of the flat buffer starts on
the group's sub-communicator. `poll` advances all of it and returns the nodes that finished
(their results copied out to this rank's instances).
"""
from __future__ import annotations


import torch

from ..errors import ExecutionError
from .buckets import allreduce_buckets
from .instances import TORCH_DTYPES
from .scheduler import node_ranks
from .steps import view_of

_SUMMABLE = {torch.float32, torch.float64, torch.int32, torch.int64}


def sum_dtype(region) -> torch.dtype:
    """The dtype an all-reduce of `region` sums in (float32 for types MPI cannot sum)."""
    dt = TORCH_DTYPES[region.dtype]
    return dt if dt in _SUMMABLE else torch.float32


_statuses: list = []       # reused by completed(): polling runs thousands of times


def completed(MPI, requests: list, what) -> list[int]:
    """Indices of the requests that completed (MPI Testsome). One that completed with an error
    (its peer died: MPI completes pending requests with an error status rather than leave
    them hanging) raises ExecutionError naming it (`what(index)`), rather than letting the
    rank go on with a buffer that never got its data."""
    if len(_statuses) < len(requests):
        _statuses.extend(MPI.Status() for _ in range(len(requests) - len(_statuses)))
    statuses = _statuses[:len(requests)]
    idx = MPI.Request.Testsome(requests, statuses)
    for n, k in enumerate(idx or ()):
        err = statuses[n].Get_error()
        if err != MPI.SUCCESS:
            raise ExecutionError(f"{what(k)} failed in MPI (error {err}: "
                                 f"{MPI.Get_error_string(err)}); a rank it depends on died?")
    return idx or []


def rank_group(node, machine) -> tuple[int, ...]:
    """The ranks taking part in an all-reduce node, sorted (its sub-communicator's key)."""
    return tuple(sorted(node_ranks(node, machine)))


class _Bucket:
    __slots__ = ("members", "flat", "sub", "ready", "request")

    def __init__(self, members, flat, sub):
        self.members, self.flat, self.sub = members, flat, sub
        self.ready, self.request = 0, None


class Collectives:
    def __init__(self, graph, rank: int, store, group_comms: dict, node_ids, host_buffer,
                 mpi, max_bytes: int):
        self.store, self.MPI = store, mpi
        devs = graph.machine.devices
        self.max_bytes = max_bytes          # Settings.bucket_bytes

        def group_of(n):
            grp = rank_group(n, graph.machine)
            return grp if len(grp) > 1 else None
        buckets = allreduce_buckets(graph, group_of, lambda n: sum_dtype(n.region),
                                    self.max_bytes)
        self.nodes = {}          # node id -> (parts, outs, acc, host view or None, bucket)
        bucket_of: dict[int, _Bucket] = {}
        offsets: dict[int, int] = {}
        for i in sorted(node_ids):
            n = graph.nodes[i]
            mine = [d for d in n.devices if devs[d].rank == rank]
            partial = dict(zip(n.devices, n.in_partial))
            parts = [view_of(store, partial[d], n.region.name, d, n.rect) for d in mine]
            outs = [view_of(store, False, n.region.name, d, n.rect) for d in mine]
            dtype = sum_dtype(n.region)
            device = store.torch_device[mine[0]]
            bucket = bucket_of.get(i)
            if bucket is None and i in buckets:
                members = buckets[i]
                numel = 0
                for m in members:               # each member's slice of the flat buffer
                    offsets[m] = numel
                    numel += graph.nodes[m].rect.volume
                bucket = _Bucket(members, host_buffer((numel,), dtype, device),
                                 group_comms[group_of(n)])
                for m in members:
                    bucket_of[m] = bucket
            host = None
            if bucket is not None:
                host = bucket.flat[offsets[i]:offsets[i] + n.rect.volume].view(n.rect.shape)
            acc = host if host is not None and host.device.type == torch.device(device).type \
                else torch.empty(n.rect.shape, dtype=dtype, device=device)
            self.nodes[i] = (parts, outs, acc, host, bucket)
        self.copies: list = []       # (event, node): device-to-host copies in flight, in order
        self.running: list[_Bucket] = []

    @property
    def busy(self) -> bool:
        """Whether collectives or their copies are in flight (worth polling for)."""
        return bool(self.running or self.copies)

    def start(self, i: int) -> list[int]:
        """Sum this rank's contributions to node i; returns the nodes that finished."""
        parts, outs, acc, host, bucket = self.nodes[i]
        acc.copy_(parts[0].t)
        for p in parts[1:]:
            p = p.t
            acc.add_(p.to(acc.device) if p.device != acc.device else p)
        if bucket is None:
            self._copy_out(i, acc)
            return [i]
        if host is acc:
            return self._member_ready(bucket)
        host.copy_(acc, non_blocking=True)
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(acc.device))
        self.copies.append((event, i))
        return []

    def poll(self) -> list[int]:
        """Advance copies and collectives; returns the nodes that finished."""
        done = []
        while self.copies and self.copies[0][0].query():
            _, i = self.copies.pop(0)
            done += self._member_ready(self.nodes[i][4])
        if self.running:
            running = self.running
            finished = completed(self.MPI, [b.request for b in running], lambda k: (
                f"all-reduce of {len(running[k].members)} gradient(s) (nodes "
                f"{list(running[k].members[:4])}...)"))
            for k in sorted(finished, reverse=True):
                bucket = self.running.pop(k)
                bucket.request, bucket.ready = None, 0
                for m in bucket.members:
                    self._copy_out(m, self.nodes[m][3])
                done += bucket.members
        return done

    def waiting(self) -> list[int]:
        """Nodes whose collective or copy is in flight (for the watchdog's report)."""
        return [i for _, i in self.copies] + [m for b in self.running for m in b.members]

    def _member_ready(self, bucket: _Bucket) -> list[int]:
        bucket.ready += 1
        if bucket.ready == len(bucket.members):
            bucket.request = bucket.sub.Iallreduce(self.MPI.IN_PLACE, bucket.flat.numpy(),
                                                   op=self.MPI.SUM)
            self.running.append(bucket)
        return []

    def _copy_out(self, i: int, src: torch.Tensor) -> None:
        for o in self.nodes[i][1]:
            o = o.t
            o.copy_(src, non_blocking=o.device.type != "cpu")
        used = self.store.node_temps.get(i)
        if used:
            self.store.end(used)
