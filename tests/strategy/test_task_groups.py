"""A node group's arrays in a SimulationSession equal what the timer and taskrt.liveness give
node by node: duration, resources, and the buffers each node uses. Task groups are made per
task class and device as arrays (strategy/taskgroups.py; a task's saved state last), read
groups node by node (a copy's and a reduce's timing per key, strategy/readgroups.py; a
reduction copy's staging buffer its own); checked
after changes and undos (buffers made through the other path in between), with several
classes in one launch (uneven parts), and with host costs."""
import random
import warnings

import numpy as np
import pytest

from parallel_ops import ParallelConfig
from strategy.costs import CostModel
from strategy.delta import SimulationSession
from strategy.machine_model import HostCost, machine_model
from taskrt.liveness import STATE, buffers_of, task_reads_writes
from taskrt.taskclasses import class_key

from mpi.models import cnn, lstm_model, mlp, random_strategy

warnings.simplefilter("ignore")       # analytic-cost fallback warnings


def check_task_groups(session):
    """Every current task group's GroupSim against the timer and liveness, node by node."""
    timer, table = session.timer, session._buffers
    rid = session.resources.ids
    assert len(table.ids) == len(table.dev.items)       # one id per buffer key
    classes = set()
    for block in session._blocks:
        for group, sim in zip(block.groups, block.sims):
            if group.key[1] is not None:
                check_read_group(session, group, sim)
                continue
            nodes = group.nodes
            assert list(sim.dur) == [timer.timing(n)[0] for n in nodes]
            assert list(sim.res_counts) == [1] * len(nodes)
            assert list(sim.res_ids) == [rid[timer.compute(n.device)] for n in nodes]
            want = [[table.ids[key] for key in buffers_of(n)] for n in nodes]
            assert list(sim.buf_counts) == [len(w) for w in want]
            assert list(sim.buf_ids) == [b for w in want for b in w]
            reads = set()
            for n in nodes:
                r, w = task_reads_writes(n)
                if w:
                    reads.update(r)
                    for name in w:
                        assert set(r) <= sim.reads_of_writers[name]
                classes.add(class_key(n)[1:])
            assert sim.read_by_writers == reads
            if timer.host_costs:
                pre = [timer.host_phases(n) for n in nodes]
                assert list(sim.host[0]) == [p[0] for p in pre]
                assert list(sim.host[2]) == [rid[p[1][0]] for p in pre]
    return classes


def check_read_group(session, group, sim):
    timer, ids, rid = session.timer, session._buffers.ids, session.resources.ids
    nodes, staged = group.nodes, group.staged
    assert list(sim.dur) == [timer.timing(n)[0] for n in nodes]
    assert list(sim.res_ids) == [rid[r] for n in nodes for r in timer.timing(n)[1]]
    want = [[ids[key] for key in buffers_of(n, staged=None if staged is None else staged[k])]
            for k, n in enumerate(nodes)]
    assert list(sim.buf_counts) == [len(w) for w in want]
    assert list(sim.buf_ids) == [b for w in want for b in w]
    own = session._buffers.own_bytes.items
    for n, w in zip(nodes, want):
        if n.kind == "copy" and n.reduction:
            assert own[w[1]] == n.nbytes            # the staging buffer's bytes
    if timer.host_costs:                            # host phases: per copy and reduce key
        phases = [timer.host_phases(n) for n in nodes]
        assert list(sim.host[0]) == [p[0] for p in phases]
        assert list(sim.host[1]) == [len(p[1]) for p in phases]
        assert list(sim.host[2]) == [rid[r] for p in phases for r in p[1]]
        assert list(sim.host[3]) == [p[2] for p in phases]
        assert list(sim.host[4]) == [len(p[3]) for p in phases]
        assert list(sim.host[5]) == [rid[r] for p in phases for r in p[3]]


def run_changes(model, seed, mm, changes=6):
    rng = random.Random(seed)
    strategy = random_strategy(model, 4, seed)
    session = SimulationSession(model, mm, CostModel(), strategy)
    classes = check_task_groups(session)
    for k in range(changes):
        op = rng.choice(model.ops)
        session.change(op.name, random_strategy(model, 4, 1000 * seed + k)[op.name])
        classes |= check_task_groups(session)
        if k % 2:
            session.undo()
            classes |= check_task_groups(session)
    return session, classes


@pytest.mark.parametrize("build", [mlp, cnn, lstm_model], ids=["mlp", "cnn", "lstm"])
def test_task_group_arrays_equal_node_by_node(build):
    session, _ = run_changes(build()[0], 5, machine_model("p100:1"))
    # Saved state (activations a forward keeps for its backward) was among the buffers.
    assert any(k[0] == STATE for k in session._buffers.ids) or build is mlp


def test_task_group_arrays_with_host_costs():
    mm = machine_model("p100:1").with_host_costs({"task": HostCost(2e-5),
                                                  "copy": HostCost(5e-6, 1e-10),
                                                  "reduce": HostCost(3e-6, 2e-10)})
    run_changes(cnn()[0], 7, mm)


def test_several_classes_in_one_launch():
    """Uneven parts: a launch whose points have two part shapes is two task classes."""
    model = mlp()[0]
    strategy = {op.name: ParallelConfig.of([0, 1, 2], n=3) for op in model.ops
                if "n" in {d.name for d in op.dims}}
    session = SimulationSession(model, machine_model("p100:1"), CostModel(), strategy)
    check_task_groups(session)
    shapes_per_launch = {}
    for block in session._blocks:
        for group in block.groups:
            if group.key[1] is None:
                keys = {class_key(n)[1:] for n in group.nodes}
                shapes_per_launch[group.key[0]] = len(keys)
    assert max(shapes_per_launch.values()) >= 2
    assert np.isfinite(session.result.makespan)


def test_a_reduce_names_each_buffer_once_and_finds_its_group_s_staging():
    """A read group of reduction copies and a reduce whose inputs repeat buffers (two
    partial sums, its own instance) and name the group's copies' staging buffers (numbered
    in one batch at the end of the group): per node the buffers buffers_of names, each once,
    the staging buffers with their copies' bytes, one id per key."""
    from taskrt import Region
    from taskrt.geometry import Rect
    from taskrt.nodegroups import NodeGroup
    from taskrt.taskgraph import CopyNode, ReduceInput, ReduceNode
    from strategy.delta_memory import BufferTable
    from strategy.readgroups import ReadGroups
    from taskrt.liveness import STAGING
    session = SimulationSession(mlp()[0], machine_model("p100:1"), CostModel())
    region, rect = Region("grad", (8, 4)), Rect.from_shape((8, 4))
    half = Rect.of((0, 4), (0, 4))
    copies = [CopyNode(k, "op", region, r, src, 0, reduction=True, from_partial=partial)
              for k, (r, src, partial) in enumerate([(rect, 1, True), (half, 2, False),
                                                     (rect, 3, True)])]
    inputs = (ReduceInput("staged", rect, 0), ReduceInput("partial", rect),
              ReduceInput("staged", half, 1), ReduceInput("partial", rect),
              ReduceInput("instance", rect), ReduceInput("staged", rect, 2))
    reduce = ReduceNode(3, "op", region, rect, 0, inputs)
    nodes = copies + [reduce]
    staged = [None, None, None, [copies[0], None, copies[1], None, None, copies[2]]]
    group = NodeGroup.of((0, "grad"), 0, nodes, [[] for _ in nodes], staged)
    table = BufferTable(4)
    sim = ReadGroups(session.timer, session.resources, table).sim(group)
    assert len(table.ids) == len(table.dev.items)
    want = [[table.ids[key] for key in buffers_of(n, staged=staged[k])]
            for k, n in enumerate(nodes)]
    assert [len(w) for w in want] == [2, 2, 2, 5]       # (the reduce's repeats named once)
    assert list(sim.buf_counts) == [len(w) for w in want]
    assert list(sim.buf_ids) == [b for w in want for b in w]
    for c in copies:
        assert table.own_bytes.items[table.ids[(STAGING, "grad", 0, c)]] == c.nbytes
