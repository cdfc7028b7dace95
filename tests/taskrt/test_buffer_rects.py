"""A graph's buffers' rects kept per region (taskrt/bufferrects.py) and its edges kept as
arrays (TaskGraph.set_edges): BufferRects behaves as the dict (region, device) -> Rect it
replaces, regions planned alike share one list (graphview.region_info) and give the graph
and the memory model that planning region by region gives, and the edge lists made from
the arrays are the sorted lists."""
import random
import warnings
import weakref

import numpy as np
import pytest

from parallel_ops import SGD, lower
from taskrt import Machine, Planner, plan
from taskrt.bufferrects import BufferRects
from taskrt.geometry import Rect
from taskrt.graphview import region_info
from taskrt.nodegroups import sorted_rows, sorted_rows_oracle
from taskrt.liveness import Liveness
from taskrt.taskgraph import TaskGraph

from test_region_classes import DEVICES, alike_strategy, plan_region_by_region, tower

warnings.simplefilter("ignore")


@pytest.mark.parametrize("seed", range(20))
def test_buffer_rects_behave_as_a_dict(seed):
    rng = random.Random(seed)
    got, want = BufferRects(), {}
    names = [f"r{i}" for i in range(6)]
    rng.shuffle(names)
    for name in names[:4]:
        pairs = [(d, Rect((d,), (d + rng.randint(1, 3),))) for d in
                 rng.sample(range(8), rng.randint(0, 5))]
        got.add_region(name, pairs)
        for d, r in pairs:
            want[name, d] = r
    for _ in range(rng.randint(0, 6)):         # (a hand-built graph's buffers)
        key = (rng.choice(names), rng.randrange(8))
        rect = Rect((0,), (rng.randint(1, 9),))
        got[key] = rect
        want[key] = rect
    # In order of entry, grouped by region (regions in order of their first entry): a
    # graph's buffers are entered region by region, where that is the dict's order.
    order = {name: i for i, (name, _) in reversed(list(enumerate(want)))}
    grouped = sorted(want.items(), key=lambda kv: order[kv[0][0]])
    assert list(got.items()) == grouped and list(got) == [k for k, _ in grouped]
    assert list(got.values()) == [r for _, r in grouped] and len(got) == len(want)
    assert got == want and want == got and bool(got) == bool(want)
    for name in names:
        for d in range(9):
            assert ((name, d) in got) == ((name, d) in want)
            assert got.get((name, d)) == want.get((name, d))
    assert ("r0",) not in got and None not in got


def _alike_plans(seed):
    model, machine = tower(), Machine.grid(DEVICES, 1)
    low = lower(model, alike_strategy(model, seed), machine, SGD(lr=0.1, momentum=0.9))
    return (plan(low.launches, machine, initial=low.initial),
            plan_region_by_region(low.launches, machine, low.initial))


@pytest.mark.parametrize("seed", range(12))
def test_regions_planned_alike_share_lists_and_give_the_same_graph(seed):
    got, want = _alike_plans(seed)
    for table in ("instance_rects", "partial_rects"):
        assert list(getattr(got, table).items()) == list(getattr(want, table).items())
    assert got.initial_valid == want.initial_valid and got.final_valid == want.final_valid
    assert got.final_pending == want.final_pending
    lists = [pairs for _, pairs in got.instance_rects.per_region()]
    assert len({id(p) for p in lists}) < len(lists)            # (some are shared)
    # The memory model works per distinct list: equal to the one over unshared lists.
    for keep in (None, "all"):
        a, b = Liveness.of(got, keep), Liveness.of(want, keep)
        assert [_named(k) for k in a.keys] == [_named(k) for k in b.keys]
        assert a.device == b.device and a.nbytes == b.nbytes
        assert a.users == b.users and list(a.persistent.items()) == list(b.persistent.items())


def _named(key):
    """A buffer key with a staging buffer's copy node by its id (the planners' node group
    ids differ)."""
    return key[:3] + (None if key[3] is None else key[3].id,)


def test_region_info_is_not_taken_for_another_planner_with_a_dead_ones_id():
    model, machine = tower(2), Machine.grid(DEVICES, 1)
    low = lower(model, alike_strategy(model, 0), machine, SGD(lr=0.1))
    p = Planner(machine, initial=low.initial)
    p.add_launches(low.launches)
    rp = next(rp for rp in p.planners.values() if rp is not None and rp.instance_rects)
    p._frozen.add(rp)

    class Gone:
        pass
    dead = weakref.ref(Gone())                     # (a planner dropped since)
    p._frozen_info[id(rp)] = (dead, ([(0, Rect((0,), (1,)))], [], [], [], []))
    info = region_info(p, rp)
    assert info[0] == list(rp.instance_rects.items())
    assert region_info(p, rp) is info                # (and remembered for the live one)


@pytest.mark.parametrize("seed", range(20))
def test_edge_rows_are_sorted_as_lists(seed):
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 5, 30)
    ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    flat = np.concatenate([rng.choice(100, c, replace=False) for c in counts]).astype(np.int64)
    got_ptr, got = sorted_rows(ptr, flat)
    assert [got[got_ptr[i]:got_ptr[i + 1]].tolist() for i in range(30)] == \
        [sorted(flat[ptr[i]:ptr[i + 1]].tolist()) for i in range(30)]


def test_edge_rows_sorted_in_place_equal_every_row_sorted():
    """sorted_rows (only the unsorted rows, in place) against the oracle sorting every row,
    on 2,000 random CSR arrays: empty and one-entry rows, rows already sorted, repeated
    values, negative and huge values (the lexsort path), unsorted rows first or last."""
    rng = np.random.default_rng(0)
    paths = {"key": 0, "lexsort": 0, "none": 0}
    for case in range(2000):
        n = int(rng.integers(0, 40))
        counts = rng.integers(0, 6, n) * (rng.random(n) < 0.8)
        ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        high = int(rng.choice([3, 50, 10 ** 6, 2 ** 61]))
        flat = rng.integers(-5 if case % 7 == 0 else 0, high, int(ptr[-1]), dtype=np.int64)
        for i in range(n):                      # most rows sorted, as a graph's mostly are
            if rng.random() < 0.7:
                flat[ptr[i]:ptr[i + 1]].sort()
        want_ptr, want = sorted_rows_oracle(ptr, flat.copy())
        rows_unsorted = not np.array_equal(want, flat)
        given = flat.copy()
        got_ptr, got = sorted_rows(ptr, given)
        assert got_ptr is ptr and got is given          # (in place)
        assert got.tolist() == want.tolist(), (case, ptr.tolist(), flat.tolist())
        paths["none" if not rows_unsorted else
              "lexsort" if flat.min() < 0 or high > 10 ** 6 else "key"] += 1
    assert min(paths.values()) > 100, paths             # (not vacuous)


@pytest.mark.parametrize("seed", range(4))
def test_edge_lists_from_arrays_equal_nodes_added_one_by_one(seed):
    got, _ = _alike_plans(seed)
    ptr, flat = got.pred_csr()
    preds, succs = got.preds, got.succs
    again = TaskGraph(got.machine)
    for node in got.nodes:
        again.add(node, preds[node.id])
    assert again.preds == preds and again.succs == succs
    assert all(p < i for i, ps in enumerate(preds) for p in ps)
    p2, f2 = again.pred_csr()
    assert p2.tolist() == ptr.tolist() and f2.tolist() == flat.tolist()
    assert got.num_edges == again.num_edges == len(flat)
