"""Task groups' predecessor arrays made in batches (taskcolumns.PendingPreds: their task
refs resolved by one table, their node refs' places and state sources read at the flush) and by one sort key (taskcolumns._per_point): each group's
arrays are its points' distinct (group, index) pairs, ascending, as made one group at a
time from Python sets (each point's ref to itself dropped); and a one-shot
plan flushed many times mid-plan, or sorted by lexsort, is the per-point records' plan
(test_plan_columns' comparison)."""
import random

import numpy as np
import pytest

import taskrt.taskcolumns as taskcolumns
from parallel_ops import lower
from strategy.costs.app_profile import load_app
from taskrt import Machine
from taskrt.nodegroups import NodeGroup
from taskrt.taskcolumns import PendingPreds, TaskRefs, _per_point

from mpi.models import random_strategy
from test_plan_columns import DEVICES, _compare


def _random_group(rng: random.Random):
    """(points, triple arrays pis / gs / qs): a few arrays, some empty, with repeats."""
    n = rng.choice([0, 1, 2, 5, 16, 33])
    pis, gs, qs = [], [], []
    for _ in range(rng.randrange(4) if n else 0):
        m = rng.choice([0, 1, 3, 20, 70])
        pis.append(np.array([rng.randrange(n) for _ in range(m)], dtype=np.int64))
        gs.append(np.array([rng.randrange(rng.choice([1, 3, 500])) for _ in range(m)],
                           dtype=np.int64))
        qs.append(np.array([rng.randrange(rng.choice([1, 4, 1100])) for _ in range(m)],
                           dtype=np.int64))
    return n, pis, gs, qs


def _random_task_refs(rng: random.Random, n: int):
    """TaskRefs of a few columns as build_task_group gathers them (rows of each column
    after the table's rows before it; some rows the group's own launch), and its triples
    as Python lists, each point's ref to itself through its own launch dropped."""
    tasks = TaskRefs([], [], [], [], [], [], [])
    want = []
    for _ in range(rng.randrange(4) if n else 0):
        rows = rng.randrange(1, 4)
        base = len(tasks.table)
        tasks.table += [rng.randrange(300) for _ in range(rows)]
        tasks.mine += [rng.random() < 0.4 for _ in range(rows)]
        m = rng.choice([0, 1, 5, 40])
        pi = [rng.randrange(n) for _ in range(m)]
        row = [rng.randrange(rows) for _ in range(m)]
        q = [p if rng.random() < 0.5 else rng.randrange(n + 3) for p in pi]
        tasks.pi.append(np.array(pi, dtype=np.int64))
        tasks.row.append(np.array(row, dtype=np.int64))
        tasks.base.append(base)
        tasks.q.append(np.array(q, dtype=np.int64))
        tasks.to_self.append(tasks.q[-1] == tasks.pi[-1])
        want += [(p, tasks.table[base + r], b) for p, r, b in zip(pi, row, q)
                 if not (tasks.mine[base + r] and b == p)]
    return tasks, want


class _Node:
    __slots__ = ("where",)

    def __init__(self, where):
        self.where = where


def _random_nodes_and_sources(rng: random.Random, n: int):
    """A group's node refs (per column its points; the nodes referred to, flat, each with
    its place) and state sources (per point None or a ref to a point of one other launch,
    and that launch's group id) as build_task_group keeps them pending, or None; and
    their triples as Python lists."""
    want, nodes, source = [], None, None
    if n and rng.random() < 0.7:
        node_pi, refs = [], []
        for _ in range(rng.randrange(1, 4)):
            pi = [rng.randrange(n) for _ in range(rng.choice([1, 4, 30]))]
            node_pi.append(np.array(pi, dtype=np.int64))
            for p in pi:
                refs.append(_Node((rng.randrange(rng.choice([1, 5, 400])),
                                   rng.randrange(rng.choice([1, 6, 900])))))
                want.append((p, *refs[-1].where))
        nodes = (node_pi, refs)
    if n and rng.random() < 0.7:
        gid, launch = rng.randrange(300), rng.randrange(50)
        srcs = [None if rng.random() < 0.3 else (launch, rng.randrange(n + 5))
                for _ in range(n)]
        source = (srcs, gid)
        want += [(p, gid, s[1]) for p, s in enumerate(srcs) if s is not None]
    return nodes, source, want


def _oracle(n, pis, gs, qs, tasks=()):
    per_point = [set() for _ in range(n)]
    for a, b, c in tasks:
        per_point[a].add((b, c))
    for pi, g, q in zip(pis, gs, qs):
        for a, b, c in zip(pi.tolist(), g.tolist(), q.tolist()):
            per_point[a].add((b, c))
    rows = [sorted(s) for s in per_point]
    return [len(r) for r in rows], [p for r in rows for p in r]


def _rows(counts, gid, idx):
    assert counts.dtype == gid.dtype == idx.dtype == np.int64
    return counts.tolist(), list(zip(gid.tolist(), idx.tolist()))


@pytest.mark.parametrize("one_key", [True, False], ids=["one-key", "lexsort"])
@pytest.mark.parametrize("seed", range(6))
def test_per_point_gives_each_points_distinct_pairs_ascending(seed, one_key, monkeypatch):
    if not one_key:
        monkeypatch.setattr(taskcolumns, "KEY_LIMIT", 0)
    rng = random.Random(seed)
    for _ in range(30):
        n, pis, gs, qs = _random_group(rng)
        assert _rows(*_per_point(n, pis, gs, qs)) == _oracle(n, pis, gs, qs)


@pytest.mark.parametrize("limit", [1, 50, 1 << 17])
@pytest.mark.parametrize("seed", range(6))
def test_pending_groups_get_the_arrays_each_would_alone(seed, limit, monkeypatch):
    monkeypatch.setattr(PendingPreds, "LIMIT", limit)
    rng = random.Random(seed)
    pending, made = PendingPreds(), []
    for k in range(rng.randrange(1, 40)):
        n, pis, gs, qs = _random_group(rng)
        tasks, triples = _random_task_refs(rng, n)
        nodes, source, more = _random_nodes_and_sources(rng, n)
        group = NodeGroup((k, None), k, [object() for _ in range(n)], None, None, None)
        made.append((group, _oracle(n, pis, gs, qs, triples + more)))
        pending.add(group, tasks, pis, gs, qs, nodes, source)
    pending.flush()
    assert not pending
    for group, want in made:
        assert len(group.pred_count) == len(group.nodes)
        assert _rows(group.pred_count, group.pred_gid, group.pred_idx) == want


@pytest.mark.parametrize("limit,key_limit", [(64, 1 << 62), (300, 0)])
def test_plans_flushed_mid_plan_equal_per_point_records(limit, key_limit, monkeypatch):
    monkeypatch.setattr(PendingPreds, "LIMIT", limit)
    monkeypatch.setattr(taskcolumns, "KEY_LIMIT", key_limit)
    random.seed(0)
    built = load_app("inception", ["--small"], devices=DEVICES)
    model, machine = built.model, Machine.grid(DEVICES, 1)
    low = lower(model, random_strategy(model, DEVICES, 5), machine, built.optimizer)
    flushes = []
    flush = PendingPreds.flush
    monkeypatch.setattr(PendingPreds, "flush",
                        lambda self: (flushes.append(len(self.groups)), flush(self)))
    _compare(low, machine, monkeypatch)
    assert sum(k > 1 for k in flushes) > 1      # (several flushes of several groups)
