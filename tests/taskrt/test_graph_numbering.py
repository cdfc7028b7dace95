"""graphview.graph_of numbers a group's nodes and lists their ids under their one owner at once
(`_number`): the graph's node ids and `launch_nodes` against their definition, node by node
in order (a task's owner is its launch's name, another node's its `owner`), on the plans of
random strategies and random programs, and on groups of several owners made by hand."""
import warnings

import pytest

from parallel_ops import SGD, lower
from taskrt import Machine, Rect, Region, plan
from taskrt.graphview import _number
from taskrt.taskgraph import TASK, CopyNode

from mpi.models import cnn, lstm_model, mlp, random_strategy

warnings.simplefilter("ignore")


def _by_definition(nodes) -> dict:
    out: dict = {}
    for i, node in enumerate(nodes):
        owner = node.launch.name if node.kind is TASK else node.owner
        out.setdefault(owner, []).append(i)
    return out


def _check(graph) -> None:
    assert [n.id for n in graph.nodes] == list(range(len(graph.nodes)))
    want = _by_definition(graph.nodes)
    assert list(graph.launch_nodes.items()) == list(want.items())


@pytest.mark.parametrize("build", [mlp, cnn, lstm_model], ids=["mlp", "cnn", "lstm"])
@pytest.mark.parametrize("seed", [None, 1, 2])
def test_ids_and_launch_nodes_of_random_strategies(build, seed):
    model, _ = build()
    machine = Machine.grid(4, 1)
    strategy = {} if seed is None else random_strategy(model, 4, seed)
    low = lower(model, strategy, machine, SGD(lr=0.1))
    _check(plan(low.launches, machine, initial=low.initial))


def test_ids_and_launch_nodes_of_random_programs():
    from test_plan_columns import twinned_graphs
    checked = 0
    for graph in twinned_graphs(range(30)):
        _check(graph)
        checked += 1
    assert checked > 10


def test_a_group_of_several_owners_is_numbered_node_by_node():
    region = Region("r", (4,))
    owners = ["a", "b", "a", "c", "b"]
    members = [CopyNode(-1, o, region, Rect((0,), (4,)), 0, 1) for o in owners]
    launch_nodes = {"b": [0]}
    assert _number(members, 3, launch_nodes) == 8
    assert [n.id for n in members] == [3, 4, 5, 6, 7]
    assert launch_nodes == {"b": [0, 4, 7], "a": [3, 5], "c": [6]}
    one = [CopyNode(-1, "d", region, Rect((0,), (4,)), 0, 1) for _ in range(3)]
    assert _number(one, 8, launch_nodes) == 11
    assert launch_nodes["d"] == [8, 9, 10] and [n.id for n in one] == [8, 9, 10]
