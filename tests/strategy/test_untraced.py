"""An untraced run's executor skips the idle points a traced run times (strategy/untraced.py):
calibration.predict prices them at nothing, task and host phases, unless asked for a traced
iteration."""
import pytest
import torch

from parallel_ops import SGD, Model, ParallelConfig
from parallel_ops.lowering import lower
from strategy.costs import CostModel
from strategy.machines import cluster_model
from strategy.machines.specs import DeviceSpec, HostCost
from strategy.preemption import PreemptedTimer, expected_makespan
from strategy.untraced import UntracedCosts, skipped_tasks
from taskrt import plan
from taskrt.executor.steps import idle
from taskrt.taskgraph import TASK

CPU = DeviceSpec("cpu", 1e10, 1e9, 5e10, 1e10, 1 << 34, 5e-6)
HOST = {"task": HostCost(2e-5, 0.0), "copy": HostCost(3e-5, 0.0), "send": HostCost(5e-5, 0.0),
        "recv": HostCost(4e-5, 0.0), "reduce": HostCost(3e-5, 0.0),
        "allreduce_start": HostCost(4e-5, 0.0), "allreduce_wait": HostCost(1e-5, 0.0)}

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")   # analytic costs


def _graph(model):
    """Batch norm split on channels only: its statistics stages are idle points (as in
    tests/taskrt/test_idle_points.py, where both executors skip them untraced)."""
    m = Model("bn", seed=0, dtype="float32")
    x = m.input("x", (4, 6, 5, 5), requires_grad=True)
    y = m.batchnorm2d(x, name="bn", activation="relu")
    m.softmax_cross_entropy(y, m.input("labels", (4, 6, 5), dtype="int64"), name="loss")
    machine = model.taskrt_machine()
    lowered = lower(m, {"bn": ParallelConfig.of([1, 0], c=2)}, machine, SGD(lr=0.1))
    return plan(lowered.launches, machine, initial=lowered.initial)


def test_an_untraced_run_prices_its_idle_points_at_nothing():
    model = cluster_model("two", CPU, 2).with_host_costs(HOST)
    g = _graph(model)
    skipped = skipped_tasks(g)
    assert skipped == {n.id for n in g.nodes if n.kind is TASK and idle(n)}
    assert skipped, "the graph has no idle points: the test checks nothing"
    traced = PreemptedTimer(model, CostModel(), 1.0, 0.0)
    untraced = PreemptedTimer(model, UntracedCosts(skipped=skipped), 1.0, 0.0)
    for n in g.nodes:
        if n.id in skipped:
            assert traced.timing(n)[0] > 0 and traced.host_phases(n)[0] > 0
            assert untraced.timing(n)[0] == 0.0
            hd, _, pd, _ = untraced.host_phases(n)
            assert hd == 0.0 and pd == 0.0
        else:                                   # every other node as traced, to the bit
            assert untraced.timing(n) == traced.timing(n)
            assert untraced.host_phases(n) == traced.host_phases(n)
    full = expected_makespan(g, model, CostModel(), 1.0, 0.0)
    assert expected_makespan(g, model, UntracedCosts(skipped=skipped), 1.0, 0.0) < full
    # nothing skipped: the traced prediction, to the bit
    assert expected_makespan(g, model, UntracedCosts(), 1.0, 0.0) == full
