"""A one-shot plan's class members' read groups made by arrays (taskrt/stampedreads.py)
against the oracle, regionclasses.stamp_nodes' moved refs resolved node by node
(regionclasses.STAMPED_READS off): every group's key, id, nodes (with a reduce's inputs),
each node's predecessors, the copies staging a reduce's inputs (by their group and place) and
the graph's digest, on models that repeat themselves, the apps, and random programs with
twin regions (partial sums and reductions included)."""
import random
import warnings
from itertools import islice

import pytest

import taskrt.regionclasses as regionclasses_module
from parallel_ops import SGD, lower
from strategy.costs.app_profile import load_app
from taskrt import Machine, Planner
from taskrt.errors import PlanError
from taskrt.oneshot import plan_once
from taskrt.regionmemo import RegionPlanMemo
from taskrt.stampedreads import StampedReads

from test_graph_golden import digest
from test_plan_columns import _twinned
from test_region_classes import alike_strategy, tower

warnings.simplefilter("ignore")

DEVICES = 4


def _describe(node) -> tuple:
    if str(node.kind) == "task":
        return (node.owner, node.color, node.device)
    if str(node.kind) == "copy":
        return ("copy", node.owner, node.region.name, str(node.rect), node.src, node.dst,
                node.reduction, node.from_partial)
    if str(node.kind) == "reduce":
        return ("reduce", node.owner, node.region.name, str(node.rect), node.device,
                tuple((i.source, str(i.rect), i.copy_id) for i in node.inputs))
    return (str(node.kind), node.owner, node.region.name, str(node.rect), node.devices,
            node.in_partial)


def planned(launches, machine, initial, stamped: bool, monkeypatch):
    """Every node group (key, id, nodes, each node's sorted preds, staging copies by their
    place) of a one-shot plan, the graph's digest, and how many groups StampedReads made
    (with how many staged reduces)."""
    monkeypatch.setattr(regionclasses_module, "STAMPED_READS", stamped)
    p = Planner(machine, initial, memo=RegionPlanMemo(0), replannable=False)
    seen = {"groups": 0, "staged": 0}
    build = p._build_reads

    def counting(key):
        items = p.region_nodes.get(key)
        if type(items) is StampedReads:
            seen["groups"] += 1
            seen["staged"] += items.refs.staged is not None
        return build(key)
    p._build_reads = counting
    plan_once(p, launches)
    rows = []
    for g in p.groups():
        # (a class member's node has its place (where) only if a task names it: the
        # staging copies by their place in the group, each place set checked)
        place = {id(n): (g.gid, i) for i, n in enumerate(g.nodes)}
        staged = None if g.staged is None else \
            [None if s is None else [None if c is None else place.get(id(c), c.where)
                                     for c in s]
             for s in g.staged]
        if g.columns is not None and g.columns.restage[0]:
            # (a class member's reduces: their staging copies by columns)
            assert staged is None
            staged = [None] * len(g.nodes)
            copies = iter(g.columns.input_copy.tolist())
            at, _, _, counts = g.columns.restage
            for k, n in zip(at, counts):
                staged[k] = [None if c < 0 else (g.gid, c) for c in islice(copies, n)]
        if g.key[1] is not None:
            assert all(n.where in (None, (g.gid, i)) for i, n in enumerate(g.nodes))
        ends = g.pred_count.cumsum().tolist()
        pairs = list(zip(g.pred_gid.tolist(), g.pred_idx.tolist()))
        preds = [sorted(pairs[e - c:e]) for c, e in zip(g.pred_count.tolist(), ends)]
        rows.append((g.key, g.gid, [_describe(n) for n in g.nodes], preds, staged))
    return rows, digest(p.finish(release=True)), seen


def _compare(launches, initial, machine, monkeypatch) -> dict:
    new, new_digest, seen = planned(launches, machine, initial, True, monkeypatch)
    old, old_digest, _ = planned(launches, machine, initial, False, monkeypatch)
    assert len(new) == len(old)
    for a, b in zip(new, old):
        assert a == b, a[0]
    assert new_digest == old_digest
    return seen


@pytest.mark.parametrize("seed", range(8))
def test_stamped_reads_equal_moved_refs_on_models_alike(seed, monkeypatch):
    model, machine = tower(), Machine.grid(DEVICES, 1)
    low = lower(model, alike_strategy(model, seed), machine, SGD(lr=0.1, momentum=0.9))
    seen = _compare(low.launches, low.initial, machine, monkeypatch)
    assert seen["groups"] > 0


@pytest.mark.parametrize("app,seed", [("inception", None), ("inception", 5), ("nmt", 5)])
def test_stamped_reads_equal_moved_refs_on_apps(app, seed, monkeypatch):
    from mpi.models import random_strategy
    random.seed(0)
    built = load_app(app, ["--small"], devices=DEVICES)
    model, machine = built.model, Machine.grid(DEVICES, 1)
    strategy = {} if seed is None else random_strategy(model, DEVICES, seed)
    low = lower(model, strategy, machine, built.optimizer)
    _compare(low.launches, low.initial, machine, monkeypatch)


def test_stamped_reads_equal_moved_refs_on_random_programs(monkeypatch):
    """60 random programs with twin regions; the comparisons reach stamped groups with
    reduces staged by copies."""
    from taskrt_helpers import launches_of
    from test_aligned_plans import MACHINE, _program
    total = {"groups": 0, "staged": 0}
    for seed in range(60):
        program, initial = _twinned(_program(seed))
        launches = launches_of(program)
        try:
            seen = _compare(launches, initial, MACHINE, monkeypatch)
        except PlanError:           # (both refuse alike: the columns tests check that)
            continue
        for k in total:
            total[k] += seen[k]
    assert total["groups"] > 0 and total["staged"] > 0, total
