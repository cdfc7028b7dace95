"""Read groups moved from a template entry (taskrt/movedreads.py: a remembered plan taken
by another region, a slab's class plan moved along time) are built by arrays and simulated
by relabelling the template's arrays (strategy/readgroups.py); the oracles are the same
session with both off (moved ref sets resolved node by node, every group walked node by
node): after each change and undo, every launch block's groups (key, nodes, each node's
predecessors, sorted) and GroupSim arrays (durations, resources, buffer ids in the order
they were numbered, host phases), the buffer table, and the results are equal; and every
moved group's arrays equal the timer and liveness node by node."""
import random
import warnings

import numpy as np
import pytest

import strategy.readgroups as readgroups_module
import taskrt.movedreads as movedreads_module
from strategy.costs import CostModel
from strategy.delta import SimulationSession
from strategy.machine_model import HostCost, machine_model
from taskrt.nodegroups import assemble

from mpi.models import lstm_model, random_strategy
from test_task_groups import check_read_group

warnings.simplefilter("ignore")       # analytic-cost fallback warnings


def _state(session) -> tuple:
    """What the session's next simulation reads: per group its key, nodes (by what they
    are) and GroupSim arrays, each node's predecessors (node ids, sorted), the buffer
    table's keys in id order (nodes by their place), and the result."""
    groups = [g for b in session._blocks for g in b.groups]
    sims = [s for b in session._blocks for s in b.sims]
    place = {id(n): (g.key, i) for g in groups for i, n in enumerate(g.nodes)}
    asm = assemble(groups, session.planner.num_group_ids, sort=True)
    rows = []
    for g, s in zip(groups, sims):
        nodes = [(n.kind, getattr(n, "src", None), getattr(n, "dst", None),
                  getattr(n, "device", None), str(n.rect) if hasattr(n, "rect") else n.color)
                 for n in g.nodes]
        host = None if s.host is None else [a.tolist() for a in s.host]
        rows.append((g.key, nodes, s.dur.tolist(), s.res_counts.tolist(), s.res_ids.tolist(),
                     s.buf_counts.tolist(), s.buf_ids.tolist(), host))
    keys = [k if k[3] is None or type(k[3]) is tuple else k[:3] + (place.get(id(k[3])),)
            for k in session._buffers.ids]
    result = session.result
    return (rows, asm.pred_ptr.tolist(), asm.preds.tolist(), keys,
            None if result is None else (result.makespan, dict(result.memory)))


def _run(moved: bool, monkeypatch, seed: int, mm, changes: int = 10,
         by_refs: list | None = None) -> tuple:
    """`by_refs`: a plan holding moved lists is moved ref by ref (its lists' refs read
    back: MovedReads.refs), counted there."""
    monkeypatch.setattr(movedreads_module, "MOVED_READS", moved)
    if by_refs is not None:
        compile_plan = movedreads_module.compile_plan

        def refusing(plan):
            if any(type(items) is movedreads_module.MovedReads for items in plan.nodes):
                by_refs.append(plan)
                return None
            return compile_plan(plan)
        monkeypatch.setattr(movedreads_module, "compile_plan", refusing)
    monkeypatch.setattr(readgroups_module, "MOVED", moved)
    model = lstm_model(batch=4, steps=6)[0]
    rng = random.Random(seed)
    session = SimulationSession(model, mm, CostModel(), random_strategy(model, 4, seed))
    states, used = [_state(session)], 0
    for k in range(changes):
        op = rng.choice(model.ops)
        session.change(op.name, random_strategy(model, 4, 1000 * seed + k)[op.name])
        states.append(_state(session))
        for block in session._blocks:
            for group, sim in zip(block.groups, block.sims):
                if group.template is not None:
                    used += 1
                    check_read_group(session, group, sim)
        if rng.random() < 0.5:
            session.undo()
            states.append(_state(session))
    return states, used


@pytest.mark.parametrize("seed", range(4))
def test_moved_groups_equal_groups_built_node_by_node(seed, monkeypatch):
    mm = machine_model("p100:1")
    new, used = _run(True, monkeypatch, seed, mm)
    old, none = _run(False, monkeypatch, seed, mm)
    assert used and not none            # (moved groups were made, and only when on)
    assert len(new) == len(old)
    for a, b in zip(new, old):
        assert a == b


def test_moved_groups_with_host_costs(monkeypatch):
    mm = machine_model("p100:1").with_host_costs({"task": HostCost(2e-5),
                                                  "copy": HostCost(5e-6, 1e-10),
                                                  "reduce": HostCost(3e-6, 2e-10)})
    new, used = _run(True, monkeypatch, 3, mm, changes=6)
    old, _ = _run(False, monkeypatch, 3, mm, changes=6)
    assert used and new == old
    assert np.isfinite(new[-1][-1][0])



def _canon(plan) -> list:
    """A plan's read nodes by what they are, each with its refs by place (a task: its
    launch's log position and point; a read node: its entry's and index), moved lists'
    refs read back."""
    pos_of = {li: j for j, li in enumerate(plan.lis)}
    place = {}
    for j, items in enumerate(plan.nodes):
        for k, item in enumerate(items or ()):
            place[item[0]] = (j, k)
    out = []
    for items in plan.nodes:
        if not items:
            out.append(items)
            continue
        refs = items.refs(lambda li: plan.nodes[pos_of[li]]) \
            if type(items) is movedreads_module.MovedReads else [r for _, r, _ in items]
        out.append([(str(n.kind), str(n.rect), n.devices,
                     sorted(map(str, (("task", pos_of[r[0]], r[1]) if type(r) is tuple
                                      else place[r]
                                      for r in rs if r is not None and r is not n))),
                     None if st is None else [place.get(c) for c in st])
                    for (n, _, st), rs in zip(items, refs)])
    return out


def test_moved_lists_moved_again(monkeypatch):
    """A plan moved twice (its moved lists moved by their template entries), and moved
    again ref by ref (where its refs could not be compiled, MovedReads.refs): the same
    nodes and refs as the plan it came from, place for place."""
    from taskrt.regionclasses import stamp
    model = lstm_model(batch=4, steps=6)[0]
    session = SimulationSession(model, machine_model("p100:1"), CostModel(),
                                random_strategy(model, 4, 2))
    rng = random.Random(2)
    for k in range(6):
        op = rng.choice(model.ops)
        session.change(op.name, random_strategy(model, 4, 3000 + k)[op.name])
    planner = session.planner
    plans = [p for by_name in planner.memo._plans.values() for p in by_name.values()
             if sum(len(items or ()) for items in p.nodes) and
             any(type(r) is not tuple for items in p.nodes for _, refs, _ in items or ()
                 if refs for r in refs if r is not None)]
    assert plans            # (plans with reads that name reads before them)
    for plan in plans[:6]:
        region = planner.regions[plan.name]
        owners = [planner.plans[li].launch.name for li in plan.lis]
        # (moved to other launch indices: a plan's refs follow its log, whatever names it)
        lis_a = tuple(li + 1000 for li in plan.lis)
        lis_b = tuple(li + 5000 for li in plan.lis)
        once = stamp(plan, region, lis_a, owners)
        twice = stamp(once, region, lis_b, owners)
        assert all(type(items) is movedreads_module.MovedReads
                   for items in twice.nodes if items)
        monkeypatch.setattr(movedreads_module, "compile_plan", lambda plan: None)
        once.moves = None           # (compiled when `twice` was made)
        by_refs = stamp(once, region, lis_b, owners)
        once.moves = None
        monkeypatch.undo()
        assert all(type(items) is list for items in by_refs.nodes if items)
        want = _canon(plan)
        assert _canon(once) == want and _canon(twice) == want and _canon(by_refs) == want
