"""A user's subclass of a built-in operator that computes something else is never priced by
its parent's declared work or saved state (parallel_ops.op.declaration_holds): its parts are
counted and measured on meta, as every user operator's are."""
from __future__ import annotations

import warnings

import torch.nn.functional as F

from bench.sim_speed import build_graph
from parallel_ops.linear import Linear
from parallel_ops.op import declaration_holds
from parallel_ops.saved_state import _measure, saved_bytes_of_parts
from strategy.costs.app_profile import load_app
from strategy.costs.formulas import declared_work
from strategy.costs.work import counted_work
from strategy.machine_model import machine_model
from taskrt.taskgraph import TASK


class TwiceLinear(Linear):
    """A user's linear layer: the product computed twice and summed (two more kernels,
    twice the FLOPs; autograd keeps what the second product needs)."""
    explicit_backward = False

    def forward(self, spec, inputs, weights):
        (x,) = inputs
        w, b = (weights + [None])[:2]
        return [F.linear(x, w, b) + F.linear(x.tanh(), w)]


def test_only_classes_that_do_not_override_what_they_compute_keep_declarations():
    class Renamed(Linear):                       # nothing computed differently
        pass
    lin = object.__new__(Linear)
    assert declaration_holds(lin, "work") and declaration_holds(lin, "saved_state_bytes")
    assert declaration_holds(object.__new__(Renamed), "work")
    twice = object.__new__(TwiceLinear)
    assert not declaration_holds(twice, "work")
    assert not declaration_holds(twice, "saved_state_bytes")


def test_a_subclass_with_its_own_forward_is_counted_and_measured():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = load_app("alexnet", ["--small"], devices=2)
        ops = [op for op in net.model.ops if type(op) is Linear]
        assert ops
        ops[0].__class__ = TwiceLinear
        machine = machine_model("p100:1").taskrt_machine()
        graph = build_graph(net.model, None, machine, net.optimizer)
    fwd = [n for n in graph.nodes if n.kind is TASK and n.launch.cost_tag[-1] == "fwd"
           and n.launch.name.startswith(ops[0].name)]
    assert fwd
    for node in fwd:
        assert declared_work(node) is None
        ops[0].__class__ = Linear                # what the parent's formula would say
        parents = declared_work(node)
        ops[0].__class__ = TwiceLinear
        assert parents is not None and counted_work(node) != parents
    spec = ops[0].part((1,) * len(ops[0].dims), (0,) * len(ops[0].dims))
    grads = (True,), (True,) * len(ops[0].weights)
    got = saved_bytes_of_parts(ops[0], {0: spec}, *grads)[0]
    assert got == _measure(ops[0], spec, *grads, "meta") > 0
