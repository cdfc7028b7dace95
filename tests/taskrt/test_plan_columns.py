"""A one-shot plan's launch records kept by region columns (planner.TASK_COLUMNS): each
launch's groups -- their ids, nodes, Red+ targets and every node's predecessors -- and the graph are those of the per-point records (the oracle, TASK_COLUMNS off), on random
strategies of models that repeat themselves (region classes: a member's preds read through
the class's moves) and of the golden-digest models, through plan_once and through a
one-shot planner given launches one by one."""
import random
import warnings

import pytest

import taskrt.planner as planner_module
from parallel_ops import SGD, lower
from strategy.costs.app_profile import load_app
from taskrt import Machine, Planner, Region, plan
from taskrt.errors import PlanError
from taskrt.oneshot import plan_once
from taskrt import regionshapes
from taskrt.regionmemo import RegionPlanMemo

from mpi.models import cnn, lstm_model, mlp, random_strategy
from test_aligned_plans import INITIAL as INITIAL_ALIGNED
from test_graph_golden import digest
from test_region_classes import alike_strategy, tower

warnings.simplefilter("ignore")

DEVICES = 4


def _describe(node) -> tuple:
    if str(node.kind) == "task":
        return (node.owner, node.color, node.device,
                tuple(None if t is None else tuple(t) for t in node.targets))
    return (str(node.kind), node.owner, str(node.rect))


def planned(launches, machine, initial, columns: bool, monkeypatch, whole: bool = True):
    """Every node group (key, id, nodes, predecessor arrays, staged copies) of a one-shot
    plan, the graph's digest, and what the columns held (for coverage)."""
    monkeypatch.setattr(planner_module, "TASK_COLUMNS", columns)
    # (classes up to whole dimensions need columns, and number the groups otherwise: the
    # records are compared with exact classes; test_region_shapes.py compares the graphs)
    monkeypatch.setattr(regionshapes, "GENERIC_CLASSES", False)
    p = Planner(machine, initial, memo=RegionPlanMemo(0), replannable=False)
    assert p.columns is columns
    seen = {"moved": 0, "targets": 0, "state": 0}
    build = p._build_columns

    def counting(key, lp):
        seen["moved"] += sum(moves is not None for _, _, moves in lp.columns)
        seen["targets"] += sum(t is not None for _, per, _ in lp.columns for _, t in per)
        seen["state"] += sum(s is not None for s in lp.state_src)
        return build(key, lp)
    p._build_columns = counting
    if whole:
        plan_once(p, launches)
    else:
        for launch in launches:
            p.add_launch(launch)
        p.refresh()
    rows = []
    for g in p.groups():
        staged = None if g.staged is None else \
            [None if s is None else [id(c) for c in s] for s in g.staged]
        # Per node its preds as a sorted list: their order within a node follows sets that
        # hold nodes (hashed by address) in either mode; finish() sorts them.
        ends = g.pred_count.cumsum().tolist()
        pairs = list(zip(g.pred_gid.tolist(), g.pred_idx.tolist()))
        preds = [sorted(pairs[e - c:e]) for c, e in zip(g.pred_count.tolist(), ends)]
        # (a class member's group by columns says by them which reduces copies stage)
        rows.append((g.key, g.gid, [_describe(n) for n in g.nodes], preds,
                     staged is not None or (g.columns is not None and
                                            bool(g.columns.restage[0]))))
    return rows, digest(p.finish(release=True)), seen


def _compare(low, machine, monkeypatch, whole=True) -> dict:
    new, new_digest, seen = planned(low.launches, machine, low.initial, True, monkeypatch,
                                    whole)
    old, old_digest, _ = planned(low.launches, machine, low.initial, False, monkeypatch,
                                 whole)
    assert len(new) == len(old)
    for a, b in zip(new, old):
        assert a == b, a[0]
    assert new_digest == old_digest
    return seen


@pytest.mark.parametrize("seed", range(10))
def test_columns_equal_per_point_records_on_models_alike(seed, monkeypatch):
    model, machine = tower(), Machine.grid(DEVICES, 1)
    low = lower(model, alike_strategy(model, seed), machine, SGD(lr=0.1, momentum=0.9))
    seen = _compare(low, machine, monkeypatch)
    assert seen["moved"] > 0                    # (members read through their class's moves)


@pytest.mark.parametrize("build", [mlp, cnn, lstm_model], ids=["mlp", "cnn", "lstm"])
@pytest.mark.parametrize("seed", [None, 1, 2, 3, 4])
def test_columns_equal_per_point_records_on_random_strategies(build, seed, monkeypatch):
    model, _ = build()
    machine = Machine.grid(DEVICES, 1)
    strategy = {} if seed is None else random_strategy(model, DEVICES, seed)
    low = lower(model, strategy, machine, SGD(lr=0.1))
    _compare(low, machine, monkeypatch)
    _compare(low, machine, monkeypatch, whole=False)     # (no classes: every region alone)


@pytest.mark.parametrize("app,seed", [("inception", None), ("inception", 5), ("nmt", 5)])
def test_columns_equal_per_point_records_on_apps(app, seed, monkeypatch):
    random.seed(0)
    built = load_app(app, ["--small"], devices=DEVICES)
    model, machine = built.model, Machine.grid(DEVICES, 1)
    strategy = {} if seed is None else random_strategy(model, DEVICES, seed)
    low = lower(model, strategy, machine, built.optimizer)
    _compare(low, machine, monkeypatch)


def test_the_cases_reach_targets_and_state(monkeypatch):
    """The comparisons above are not vacuous: Red+ targets and state sources occur."""
    total = {"moved": 0, "targets": 0, "state": 0}
    for seed in range(1, 5):
        for build in (mlp, cnn, lstm_model):
            model, _ = build()
            machine = Machine.grid(DEVICES, 1)
            low = lower(model, random_strategy(model, DEVICES, seed), machine, SGD(lr=0.1))
            _, _, seen = planned(low.launches, machine, low.initial, True, monkeypatch)
            for k in total:
                total[k] += seen[k]
    assert total["targets"] > 0 and total["state"] > 0, total


def twinned_graphs(seeds):
    """The graphs of `_twinned` random programs (test_aligned_plans._program of each seed)
    planned on test_aligned_plans.MACHINE, skipping the programs the planner refuses."""
    from taskrt_helpers import launches_of
    from test_aligned_plans import MACHINE, _program
    for seed in seeds:
        program, initial = _twinned(_program(seed))
        try:
            graph = plan(launches_of(program), MACHINE, initial)
        except PlanError:
            continue
        yield graph


def _twinned(program):
    """`program` (test_aligned_plans._program) on its regions and, launch by launch, on
    twins of them (regions alike: planned once, the twin's preds read through moves); a
    write of a rect is preceded in the same point by a read of it (the write's preds then
    name the point's own task, which the tasks' group skips)."""
    from taskrt import RED, R
    from test_aligned_plans import REGIONS
    twin = {r: Region(r.name + "_twin", r.shape, r.dtype) for r in REGIONS}
    out = []
    for points, replicas in program:
        mine = []
        for device, reqs in points:
            got = []
            for region, rect, priv in reqs:
                got.append((region, rect, priv))
                if priv is R or priv is RED:        # twice: a point's preds merged
                    got.append((region, rect, priv))
            mine.append((device, got))
        out.append((mine, replicas))
        out.append(([(d, [(twin[g], r, p) for g, r, p in reqs]) for d, reqs in mine],
                    replicas))
    initial = {}
    for region, pieces in INITIAL_ALIGNED.items():
        initial[region] = pieces
        initial[twin[region]] = pieces
    return out, initial


@pytest.mark.parametrize("seed", range(40))
def test_columns_equal_per_point_records_on_random_programs(seed, monkeypatch):
    from taskrt_helpers import launches_of
    from test_aligned_plans import MACHINE, _program
    program, initial = _twinned(_program(seed))
    launches = launches_of(program)

    class Low:                      # (what _compare reads of a lowering)
        pass
    low = Low()
    low.launches, low.initial = launches, initial
    try:
        seen = _compare(low, MACHINE, monkeypatch)
    except PlanError as e:          # (both modes refuse alike: the oracle raised too)
        monkeypatch.setattr(planner_module, "TASK_COLUMNS", False)
        with pytest.raises(PlanError, match=str(e)[:30].replace("(", r"\(")):
            plan(launches, MACHINE, initial)
        return
    assert seen["moved"] > 0


@pytest.mark.parametrize("seed", range(20))
def test_deferred_reads_are_by_regions_reads(seed):
    """by_region(points, deferred=True) (RegionClasses.find for a one-shot planner): every
    region's reads and accesses, once made by reads_list and accesses_list, equal
    by_region's."""
    from taskrt.launchplan import (DeferredAccesses, DeferredReads, accesses_list,
                                   by_region, reads_list)
    from taskrt_helpers import launches_of
    from test_aligned_plans import MACHINE, _program
    program, initial = _twinned(_program(seed))
    p = Planner(MACHINE, initial, memo=RegionPlanMemo(0), replannable=False)
    deferred = later = 0
    for launch in launches_of(program) + launches_of(_program(seed), "plain"):
        points = p._expand(launch)
        reads, accesses = by_region(points, True)
        want_reads, want_accesses = by_region(points)
        deferred += sum(type(r) is DeferredReads for r in reads.values())
        later += sum(type(a) is DeferredAccesses for a in accesses.values())
        assert list(reads) == list(want_reads) and list(accesses) == list(want_accesses)
        assert {n: reads_list(r) for n, r in reads.items()} == want_reads
        assert {n: accesses_list(a) for n, a in accesses.items()} == want_accesses
    assert deferred > 0 and later > 0
