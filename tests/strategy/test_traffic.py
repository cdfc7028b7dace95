"""A full simulation's traffic totals (strategy.simulator.traffic_of: the report's bytes of
copies between devices and of all-reduces, and the devices tasks run on, summed from the
simulation's columns) equal the same totals asked node by node, on random hand-built graphs
(copies some on one device, reduction copies, reduces, all-reduces; test_other_columns's)
and on the apps' graphs under random strategies."""
import random
import warnings

import pytest

from bench.sim_speed import build_graph, random_config
from strategy.costs import CostModel
from strategy.costs.app_profile import load_app
from strategy.machine_model import machine_model
from strategy.simulator import simulate
from taskrt.taskgraph import ALLREDUCE, COPY, TASK

from sim_graphs import lab
from test_other_columns import random_graph

warnings.simplefilter("ignore")


def by_node(graph) -> dict:
    out = {"copy": 0, "allreduce": 0}
    for n in graph.nodes:
        if n.kind is COPY and n.src != n.dst:
            out["copy"] += n.nbytes
        elif n.kind is ALLREDUCE:
            out["allreduce"] += n.nbytes
    out["devices_used"] = len({n.device for n in graph.nodes if n.kind is TASK})
    return out


@pytest.mark.parametrize("seed", range(20))
def test_hand_built_graphs(seed):
    h = random_graph(seed)
    assert simulate(h.graph, lab(), h.costs()).traffic == by_node(h.graph)


@pytest.mark.parametrize("app", ["transformer", "inception", "nmt"])
def test_apps_under_random_strategies(app):
    rng = random.Random(app)
    net = load_app(app, ["--small"], devices=4)
    mm = machine_model("p100:1")
    for trial in range(3):
        strategy = None if trial == 0 else {op.name: random_config(op, 4, rng)
                                            for op in net.model.ops}
        graph = build_graph(net.model, strategy, mm.taskrt_machine(), net.optimizer)
        got = simulate(graph, mm, CostModel()).traffic
        assert got == by_node(graph)
        assert got["copy"] > 0 or trial == 0
