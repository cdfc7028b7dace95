"""Gradient buckets: runs of all-reduces that the MPI executor fuses into one MPI collective.

Inception-v3 has over 400 weight all-reduces per iteration. One MPI collective each costs a
latency and, worse, needs the rank to poll MPI for every step of every one of them; torch DDP
fuses gradients into ~25 MB buckets for the same reason. Here buckets come from the graph
alone, so that every rank forms the same ones and starts them in the same order: the
all-reduce nodes of one set of ranks and one sum dtype, in node id order (the order the ranks
start them in), cut into runs of at most `max_bytes` (a node larger than that is a bucket of
its own). A bucket starts when its last member is ready, so a node that depends, through any
path in the graph, on an all-reduce of the bucket being formed starts a new bucket instead
(it would wait on itself).

    buckets = allreduce_buckets(graph, group_of, dtype_of, max_bytes=25 << 20)
    buckets[node_id]     # the ids of the bucket node_id belongs to, in order
"""
from __future__ import annotations

from typing import Callable, Hashable

from ..taskgraph import ALLREDUCE


def latest_allreduce_ancestor(graph) -> list[int]:
    """Per node: the largest id of an all-reduce it depends on (transitively), or -1."""
    nodes, preds = graph.nodes, graph.preds
    out = [-1] * len(nodes)
    for i in range(len(nodes)):
        best = -1
        for p in preds[i]:
            a = p if nodes[p].kind is ALLREDUCE else out[p]
            if a > best:
                best = a
        out[i] = best
    return out


def allreduce_buckets(graph, group_of: Callable[[object], Hashable | None],
                      dtype_of: Callable[[object], Hashable],
                      max_bytes: int) -> dict[int, tuple[int, ...]]:
    """Node id -> its bucket (member ids in id order) for every all-reduce node for which
    `group_of(node)` is not None (e.g. the set of ranks taking part; None: not fused).
    Buckets never mix groups or dtypes (`dtype_of(node)`: the dtype the sum is taken in)."""
    if max_bytes < 0:
        raise ValueError(f"allreduce_buckets: max_bytes {max_bytes}; use 0 (no fusing) or more.")
    ancestor = latest_allreduce_ancestor(graph)
    open_buckets: dict[tuple, tuple[list[int], int]] = {}   # key -> (members, bytes)
    done: list[list[int]] = []
    for node in graph.nodes:
        if node.kind is not ALLREDUCE:
            continue
        group = group_of(node)
        if group is None:
            continue
        key = (group, dtype_of(node))
        nbytes = node.nbytes
        current = open_buckets.get(key)
        if current is not None:
            members, size = current
            if size + nbytes > max_bytes or ancestor[node.id] >= members[0]:
                done.append(members)
                current = None
        if current is None:
            open_buckets[key] = ([node.id], nbytes)
        else:
            members.append(node.id)
            open_buckets[key] = (members, size + nbytes)
    done.extend(members for members, _ in open_buckets.values())
    out: dict[int, tuple[int, ...]] = {}
    for members in done:
        bucket = tuple(members)
        for i in bucket:
            out[i] = bucket
    return out
