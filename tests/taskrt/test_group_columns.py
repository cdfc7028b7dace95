"""A one-shot plan's columns of the nodes that are not tasks, made per node group by the
planner (taskrt/groupcolumns.py), equal those OtherColumns.of reads from the graph's node
objects, array by array: on towers of blocks planned alike (class members' groups take their
template entry's columns), the small apps with random strategies, and random programs with
twin regions (reduces staged by copies in stamped groups)."""
import random
import warnings

import numpy as np
import pytest

from parallel_ops import SGD, lower
from strategy.costs.app_profile import load_app
from taskrt import Machine, plan
from taskrt.othercolumns import OtherColumns, other_columns
from taskrt.taskclasses import TaskClasses, kind_codes
from taskrt.taskgraph import NodeKind, TaskNode

from test_plan_columns import twinned_graphs
from test_region_classes import alike_strategy, tower

warnings.simplefilter("ignore")

DEVICES = 4
FIELDS = OtherColumns.__slots__


def assert_planned_columns_equal_the_nodes(graph) -> int:
    """The graph's planned columns against OtherColumns.of its nodes; returns how many
    stamped copies and reduce inputs the plan had (what the template's columns gave)."""
    planned = graph.other_columns
    assert planned is not None
    classes = TaskClasses.of(graph.nodes)
    read = OtherColumns.of(graph.nodes, classes.others, graph.regions)
    for name in FIELDS:
        a, b = getattr(planned, name), getattr(read, name)
        if name == "nodes":
            assert len(a) == len(b) and all(x is y for x, y in zip(a, b))
        else:
            assert a.dtype == b.dtype, name
            assert np.array_equal(a, b), name
    assert other_columns(graph, classes) is planned
    # Every node's kind code, planned with the columns: what TaskClasses.of and count() take
    assert graph.node_kinds.dtype == np.int8
    assert np.array_equal(graph.node_kinds, kind_codes(graph.nodes))
    by_node = dict.fromkeys(map(str, NodeKind), 0)
    for node in graph.nodes:
        by_node[str(node.kind)] += 1
    assert graph.count() == by_node
    return sum(len(n.inputs) for n in read.nodes if str(n.kind) == "reduce")


@pytest.mark.parametrize("seed", range(8))
def test_planned_columns_on_models_alike(seed):
    model, machine = tower(), Machine.grid(DEVICES, 1)
    low = lower(model, alike_strategy(model, seed), machine, SGD(lr=0.1, momentum=0.9))
    assert_planned_columns_equal_the_nodes(plan(low.launches, machine, low.initial))


@pytest.mark.parametrize("app,seed", [("inception", None), ("inception", 5), ("nmt", 5),
                                      ("transformer", 3)])
def test_planned_columns_on_apps(app, seed):
    from mpi.models import random_strategy
    random.seed(0)
    built = load_app(app, ["--small"], devices=DEVICES)
    model, machine = built.model, Machine.grid(DEVICES, 1)
    strategy = {} if seed is None else random_strategy(model, DEVICES, seed)
    low = lower(model, strategy, machine, built.optimizer)
    assert_planned_columns_equal_the_nodes(plan(low.launches, machine, low.initial))


def test_planned_columns_on_random_programs():
    """Random programs with twin regions: stamped groups with reduces staged by copies."""
    inputs = 0
    for graph in twinned_graphs(range(60)):
        inputs += assert_planned_columns_equal_the_nodes(graph)
    assert inputs > 0


def test_a_graph_changed_after_planning_is_read_from_its_nodes():
    model, machine = tower(), Machine.grid(DEVICES, 1)
    low = lower(model, alike_strategy(model, 0), machine, SGD(lr=0.1, momentum=0.9))
    graph = plan(low.launches, machine, low.initial)
    # Columns of other nodes (another graph's) are not taken.
    other = plan(low.launches[:len(low.launches) // 2], machine, low.initial)
    graph.other_columns, mine = other.other_columns, graph.other_columns
    classes = TaskClasses.of(graph.nodes)
    assert other_columns(graph, classes) is not other.other_columns
    graph.other_columns = mine
    task = next(n for n in graph.nodes if str(n.kind) == "task")
    graph.add(TaskNode(len(graph.nodes), task.launch, (9,), 0, (), ()), [])
    assert graph.other_columns is None and graph.node_kinds is None
    assert graph.count()["task"] == sum(str(n.kind) == "task" for n in graph.nodes)
    classes = TaskClasses.of(graph.nodes)
    assert other_columns(graph, classes).copy_src is not None
