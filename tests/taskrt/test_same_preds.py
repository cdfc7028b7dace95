"""nodegroups.same_preds (each node's predecessors equal as sets, in any order) against
per-node sets, and the planner keeping a rebuilt task group that lists its predecessors
in another order as the group of before (Planner._build_tasks, planner.SAME_PRED_SETS):
the same versions as when the order comes out alike, and the same graph as a full plan."""
import random
import warnings

import numpy as np
import pytest

from taskrt import Machine, planner as planner_module
from taskrt.nodegroups import NodeGroup, same_preds

from mpi.models import cnn, random_strategy
from plan_checks import assert_same_plan, planner_of, replace_strategy

warnings.simplefilter("ignore")


def _group(rows: list) -> NodeGroup:
    return NodeGroup.of((0, None), 0, [object() for _ in rows], rows)


def _as_sets(group: NodeGroup) -> list:
    ptr = np.concatenate([[0], np.cumsum(group.pred_count)])
    pairs = list(zip(group.pred_gid.tolist(), group.pred_idx.tolist()))
    return [set(pairs[ptr[i]:ptr[i + 1]]) for i in range(len(group.pred_count))]


def _variant(rng: random.Random, rows: list, big: int) -> list:
    """rows with each row's pairs shuffled, and maybe one change that keeps the counts: a
    pair moved to another row, a pair's index changed, two rows' pairs swapped."""
    out = [rng.sample(row, len(row)) for row in rows]
    kind = rng.choice(["shuffled", "moved", "changed", "swapped"])
    full = [i for i, row in enumerate(out) if row]
    if kind == "moved" and len(full) >= 2:
        a, b = rng.sample(full, 2)
        pair = out[a][0]
        if pair not in out[b]:
            out[b][0] = pair
    elif kind == "changed" and full:
        a = rng.choice(full)
        gid, idx = out[a][0]
        if (gid, idx + 1) not in out[a]:
            out[a][0] = (gid, (idx + 1) % big if big > 1 else idx + 1)
    elif kind == "swapped" and len(out) >= 2:
        a, b = rng.sample(range(len(out)), 2)
        out[a], out[b] = out[b], out[a]
    return out


@pytest.mark.parametrize("big", [4, 1000, 2 ** 40])
def test_same_preds_is_equality_of_each_nodes_set(big):
    rng = random.Random(big)
    answers = set()
    for case in range(400):
        n = rng.randint(1, 6)
        rows = [list({(rng.randrange(big), rng.randrange(big))
                      for _ in range(rng.randint(0, 5))}) for _ in range(n)]
        other = _variant(rng, rows, big)
        a, b = _group(rows), _group(other)
        want = _as_sets(a) == _as_sets(b)
        assert same_preds(a, b) == want, f"case {case}: {rows} vs {other}"
        assert same_preds(b, a) == want
        assert same_preds(a, b, any_order=False) == (want and rows == other)
        answers.add((want, rows == other))
    assert answers == {(True, True), (True, False), (False, False)}


def _versions_over_changes(shuffled: bool, any_order: bool, monkeypatch) -> list:
    """Per replace, refresh and undo of random config changes of the cnn on 4 devices:
    the launches given new versions; every graph checked against a full plan. `shuffled`:
    each task group lists each node's predecessors in a random order."""
    monkeypatch.setattr(planner_module, "SAME_PRED_SETS", any_order)
    if shuffled:
        order = random.Random(7)
        real = NodeGroup.of

        class Shuffled(NodeGroup):
            @classmethod
            def of(cls, key, gid, nodes, preds, staged=None):
                preds = [order.sample(list(p), len(p)) for p in preds]
                return real(key, gid, nodes, preds, staged)
        monkeypatch.setattr(planner_module, "NodeGroup", Shuffled)
    model, _ = cnn()
    machine = Machine.grid(4, 1)
    strategy = random_strategy(model, 4, seed=1)
    planner = planner_of(model, strategy, machine)
    planner.refresh()
    rng = random.Random(3)
    out = []
    for step in range(30):
        op = rng.choice(model.ops)
        trial = dict(strategy, **{op.name: random_strategy(model, 4, 100 + step)[op.name]})
        mark = planner.next_version
        replace_strategy(planner, model, trial, machine)
        planner.refresh()
        out.append(planner.versions_since(mark))
        full = planner_of(model, trial, machine).finish()
        assert_same_plan(planner.finish(), full, f"step {step}")
        if rng.random() < 0.6:
            mark = planner.next_version
            planner.undo()
            planner.refresh()
            out.append(planner.versions_since(mark))
        else:
            strategy = trial
    return out


def test_a_task_group_listing_its_preds_in_another_order_keeps_its_version(monkeypatch):
    alike = _versions_over_changes(False, True, monkeypatch)
    assert _versions_over_changes(True, True, monkeypatch) == alike
    # (the order does matter to the check by arrays: the shuffle is felt)
    by_arrays = _versions_over_changes(True, False, monkeypatch)
    assert sum(map(len, by_arrays)) > sum(map(len, alike))
