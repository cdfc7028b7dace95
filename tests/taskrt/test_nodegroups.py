"""Node groups (taskrt/nodegroups.py) give, node for node, the graph that the planner's state
gives when assembled directly in program order, the way Planner.finish() did before groups
(kept here as the oracle): after planning from scratch and after random sequences of
changes and undos, on the test models and on random strategies."""
import random
import warnings
from operator import itemgetter

import numpy as np
import pytest

from parallel_ops import SGD
from parallel_ops.lowering import IncrementalLowering
from taskrt import Machine, Planner
from taskrt.movedreads import MovedReads
from taskrt.nodegroups import GroupRun, NodeGroup, assemble, resolve, sorted_rows_oracle

from mpi.models import cnn, lstm_model, mlp, random_strategy

warnings.simplefilter("ignore")


def direct_assembly(p: Planner):
    """(nodes, sorted preds per node) straight from the planner's per-launch state: each
    launch's read nodes region by region in first-read order, then its tasks, with
    predecessor refs (task refs, node objects) turned into ids."""
    ids, order = {}, []
    task_id = {}
    for li, lp in enumerate(p.plans):
        for name in lp.read_order:
            items = p.region_nodes.get((li, name), ())
            if type(items) is MovedReads:       # (its refs are its template entry's, moved)
                items = zip(map(itemgetter(0), items),
                            items.refs(lambda lj, name=name: p.region_nodes[lj, name]),
                            items)
            for node, refs, _ in items:
                ids[id(node)] = len(order)
                order.append(("node", node, refs))
        for pi in range(len(lp.points)):
            task_id[li, pi] = len(order)
            refs = set()
            for s in lp.task_preds[pi].values():
                refs.update(s)
            if lp.state_src[pi] is not None:
                refs.add(lp.state_src[pi])
            order.append(("task", (li, pi), refs))
    preds = []
    for i, (_, _, refs) in enumerate(order):
        ps = {task_id[r] if type(r) is tuple else ids[id(r)] for r in refs if r is not None}
        ps.discard(i)
        preds.append(sorted(ps))
    return order, preds


def check(planner):
    order, preds = direct_assembly(planner)
    g = planner.finish()
    assert len(g.nodes) == len(order)
    for i, (kind, what, _) in enumerate(order):
        node = g.nodes[i]
        if kind == "node":
            assert node is what, f"node {i}: {node.describe()}"
        else:
            assert node.kind == "task" and node.launch is planner.plans[what[0]].launch and \
                node.color == planner.plans[what[0]].points[what[1]][0], f"node {i}"
        assert g.preds[i] == preds[i], f"node {i} ({node.describe()}): preds"
    asm = assemble(planner.groups(), planner.num_group_ids)
    assert asm.num_nodes == len(order)
    ptr, flat = joined_assembly(planner.groups(), planner.num_group_ids)
    assert asm.pred_ptr.tolist() == ptr.tolist() and asm.preds.tolist() == flat.tolist()
    assert [sorted(asm.preds[asm.pred_ptr[i]:asm.pred_ptr[i + 1]].tolist())
            for i in range(len(order))] == preds


@pytest.mark.parametrize("build", [mlp, cnn, lstm_model], ids=["mlp", "cnn", "lstm"])
@pytest.mark.parametrize("seed", range(4))
def test_groups_equal_the_direct_assembly_after_changes_and_undos(build, seed):
    model = build()[0]
    devices = 4 if seed % 2 else 8
    machine = Machine.grid(devices, 1)
    lowering = IncrementalLowering(model, random_strategy(model, devices, seed), machine,
                                   SGD(lr=0.1, momentum=0.9))
    low = lowering.lowered()
    planner = Planner(machine, initial=low.initial)
    for launch in low.launches:
        planner.add_launch(launch)
    check(planner)
    rng = random.Random(seed)
    for k in range(8):
        op = rng.choice(model.ops)
        before = (lowering.configs[op.name], lowering.parts[op.name])
        part = lowering.change(op.name, random_strategy(model, devices, 100 * seed + k)[op.name])
        new = lowering.lowered()
        names = set(part.initial_forward) | set(part.initial_update)
        initial = {r: p for r, p in new.initial.items() if r.name in names}
        assert lowering.initial_of(names) == initial     # what delta.py passes instead
        planner.replace(part.forward + part.backward + list(part.updates.values()), initial,
                        record_undo=True)
        if rng.random() < 0.5:
            planner.groups()                   # rebuilt, then put back by the undo
        check(planner)
        if rng.random() < 0.5:
            planner.undo()
            lowering.restore(op.name, *before)
            check(planner)


def joined_assembly(groups: list, num_gids: int):
    """assemble's oracle: the groups joined into one GroupRun, resolved as delta
    simulation resolves its runs (nodegroups.resolve)."""
    if not groups:
        return np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    run = GroupRun.of(groups)
    one = np.ones(1, dtype=np.int64)
    asm = resolve(run.gids, run.offsets, one * len(run.gids), one * run.size,
                  run.pred_count, run.pred_gid, run.pred_idx, num_gids)
    return asm.pred_ptr, asm.preds


@pytest.mark.parametrize("in_place", [0, 1 << 40], ids=["in place", "joined"])
@pytest.mark.parametrize("sort_in_group", [2, 4096])
@pytest.mark.parametrize("seed", range(40))
def test_assemble_equals_resolving_the_joined_groups(seed, sort_in_group, in_place,
                                                       monkeypatch):
    """Random groups (ids in any order, some without nodes or predecessors, refs to any
    group, earlier or later): assemble writes each group's arrays in place of joining
    them (graphs of ASSEMBLE_IN_PLACE edges or more), each group's rows sorted there or
    after (SORT_IN_GROUP); the same arrays as joining and resolving."""
    import taskrt.nodegroups as ng
    monkeypatch.setattr(ng, "ASSEMBLE_IN_PLACE", in_place)
    monkeypatch.setattr(ng, "SORT_IN_GROUP", sort_in_group)
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 12))
    num_gids = n + int(rng.integers(0, 5))
    gids = rng.permutation(num_gids)[:n]
    sizes = rng.integers(0, 6, size=n) * (rng.random(n) < 0.8)
    groups = []
    for gid, size in zip(gids.tolist(), sizes.tolist()):
        counts = rng.integers(0, 4, size=size) * (rng.random(size) < 0.7)
        total = int(counts.sum())
        to = rng.integers(0, n, size=total) if n else np.zeros(0, dtype=np.int64)
        idx = np.array([int(rng.integers(0, max(int(sizes[t]), 1))) for t in to.tolist()],
                       dtype=np.int64)
        groups.append(NodeGroup((len(groups), None), gid, [object()] * size,
                                counts.astype(np.int64), gids[to].astype(np.int64), idx))
    ptr, preds = joined_assembly(groups, num_gids)
    asm = assemble(groups, num_gids)
    assert asm.pred_ptr.tolist() == ptr.tolist()
    assert asm.preds.tolist() == preds.tolist()
    # sort: each node's predecessors ascending, as sorting every row after
    asm = assemble(groups, num_gids, sort=True)
    ptr, preds = sorted_rows_oracle(ptr, preds)
    assert asm.pred_ptr.tolist() == ptr.tolist()
    assert asm.preds.tolist() == preds.tolist()
