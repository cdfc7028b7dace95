"""Gradient buckets (taskrt/executor/buckets.py): every all-reduce in exactly one bucket of one
rank group and dtype, in id order, within the byte limit, and never a member that depends on
an all-reduce of its own bucket or a later one (which could deadlock the fused collective)."""
from dataclasses import dataclass

import pytest

from parallel_ops import SGD, lower
from taskrt import Machine, plan
from taskrt.executor.buckets import allreduce_buckets, latest_allreduce_ancestor
from taskrt.taskgraph import ALLREDUCE, TASK, NodeKind

from mpi.models import cnn, lstm_model
from taskrt_helpers import ancestors


def ranks_of(graph):
    devs = graph.machine.devices
    return lambda node: tuple(sorted({devs[d].rank for d in node.devices}))


@pytest.mark.parametrize("build", [cnn, lstm_model], ids=["cnn", "lstm"])
@pytest.mark.parametrize("max_bytes", [0, 4096, 1 << 30])
def test_buckets_cover_every_allreduce_in_order_within_the_limit(build, max_bytes):
    model, _ = build()
    machine = Machine.grid(2, 2)
    low = lower(model, None, machine, SGD(lr=0.1))
    graph = plan(low.launches, machine, initial=low.initial)
    group = ranks_of(graph)
    buckets = allreduce_buckets(graph, group, lambda n: n.region.dtype, max_bytes)
    ars = [n for n in graph.nodes if n.kind == "allreduce"]
    assert ars and set(buckets) == {n.id for n in ars}
    distinct = set(buckets.values())
    for b in distinct:
        assert list(b) == sorted(b)
        assert len({group(graph.nodes[i]) for i in b}) == 1
        size = sum(graph.nodes[i].nbytes for i in b)
        assert len(b) == 1 or size <= max_bytes
        for i in b[1:]:
            assert not any(graph.nodes[a].kind == "allreduce" and a >= b[0]
                           for a in ancestors(graph, i))
    if max_bytes == 0:
        assert len(distinct) == len(ars)
    if max_bytes == 1 << 30:
        assert len(distinct) < len(ars)       # the limit is what cuts, not the dependences


@dataclass
class N:
    id: int
    kind: NodeKind
    nbytes: int = 4


@dataclass
class G:
    nodes: list
    preds: list


def test_a_member_that_depends_on_the_bucket_starts_a_new_one():
    # 0: allreduce, 1: task after it, 2: allreduce depending on 1 (so on 0), 3: allreduce free
    g = G([N(0, ALLREDUCE), N(1, TASK), N(2, ALLREDUCE), N(3, ALLREDUCE)],
          [[], [0], [1], []])
    assert latest_allreduce_ancestor(g) == [-1, 0, 0, -1]
    buckets = allreduce_buckets(g, lambda n: "g", lambda n: "f32", 1 << 20)
    assert buckets[0] == (0,)
    assert buckets[2] == buckets[3] == (2, 3)


def test_negative_limit_is_an_error():
    g = G([N(0, "allreduce")], [[]])
    with pytest.raises(ValueError, match="max_bytes"):
        allreduce_buckets(g, lambda n: "g", lambda n: "f32", -1)
