"""The standard strategies (strategy/standard.py): valid for every app's --small model on 1-4
devices, lowered and planned; operation parallelism spreads work over every device; random
strategies repeat with their seed; and one real run per strategy trains AlexNet exactly as
data parallelism does."""
import random

import pytest
import torch

from apps import APPS
from parallel_ops import ConfigError
from parallel_ops.config import ParallelConfig, validate
from parallel_ops.lowering import lower
from parallel_ops.trainer import Trainer
from strategy import standard
from strategy.costs.app_profile import load_app
from taskrt import Machine, plan

NAMES = ("data", "parameter", "attribute", "operation", "random")
PLANNED = {"inception": (3,), "resnet": (3,)}      # big graphs: plan at one device count


def make(name, model, devices):
    if name == "random":
        return standard.random_strategy(model, devices, 0)
    return standard.STANDARD[name](model, devices)


@pytest.fixture(scope="module", params=APPS)
def app(request):
    return request.param, {n: load_app(request.param, ["--small"], n) for n in (1, 2, 3, 4)}


def test_every_strategy_is_valid_and_plans(app):
    name, built = app
    for n, net in built.items():
        opt = net.optimizer
        machine = Machine.local(n)
        for s in NAMES:
            strategy = make(s, net.model, list(range(n)))
            assert set(strategy) == {op.name for op in net.model.ops}
            for op in net.model.ops:
                validate(op, strategy[op.name], machine)
            if n in PLANNED.get(name, (1, 2, 3, 4)):
                lowered = lower(net.model, strategy, machine, opt)
                graph = plan(lowered.launches, machine, initial=lowered.initial)
                assert len(graph.nodes) > 0


def test_operation_parallel_spreads_ops_over_every_device(app):
    name, built = app
    net = built[4]
    devices = [3, 1, 0, 2]
    s = standard.operation_parallel(net.model, devices)
    used = [s[op.name].devices[0] for op in net.model.ops]
    assert all(cfg.num_parts == 1 for cfg in s.values())
    assert set(used) == set(devices)
    # contiguous blocks in program order, in the order of the device list
    blocks = [devices.index(d) for d in used]
    assert blocks == sorted(blocks)


def test_balanced_blocks_minimize_the_largest_block():
    assert standard.balanced_blocks([1, 1, 1, 1], 2) == [0, 0, 1, 1]
    assert standard.balanced_blocks([5, 1, 1, 1, 1, 1], 2) == [0, 1, 1, 1, 1, 1]
    assert standard.balanced_blocks([3, 1, 1, 1, 1, 1], 2) == [0, 0, 1, 1, 1, 1]
    assert standard.balanced_blocks([1, 9, 1], 3) == [0, 1, 2]
    assert standard.balanced_blocks([2, 2], 4) == [0, 1]


def test_fallbacks_respect_extents():
    net = load_app("alexnet", ["--small"], 4)
    model = net.model
    devices = [0, 1, 2, 3]
    par = standard.parameter_parallel(model, devices)
    att = standard.attribute_parallel(model, devices)
    pool = next(op for op in model.ops if op.type == "max_pool2d" and op.dims[2].extent == 3)
    assert att[pool.name] == ParallelConfig.of([0, 1, 2], h=3)       # fewer devices
    drop = next(op for op in model.ops if op.type == "dropout")
    assert par[drop.name] == ParallelConfig.of(devices, n=4)          # no parameter dim: DP
    fc = next(op for op in model.ops if op.type == "linear")
    assert par[fc.name] == ParallelConfig.of(devices, o=4)


def test_random_strategy_is_reproducible_and_varied():
    net = load_app("inception", ["--small"], 4)
    a = standard.random_strategy(net.model, [0, 1, 2, 3], 7)
    b = standard.random_strategy(net.model, [0, 1, 2, 3], random.Random(7))
    c = standard.random_strategy(net.model, [0, 1, 2, 3], 8)
    assert a == b and a != c
    assert len({cfg.num_parts for cfg in a.values()}) > 1
    assert any(len(cfg.degrees) > 1 for cfg in a.values())            # several dims at once


def test_bad_device_lists_are_refused():
    net = load_app("rnnlm", ["--small"], 1)
    with pytest.raises(ValueError, match="empty device list"):
        standard.data_parallel(net.model, [])
    with pytest.raises(ValueError, match="repeat an id"):
        standard.operation_parallel(net.model, [0, 0])


def test_each_strategy_trains_alexnet_like_data_parallel():
    argv = ["--small", "--batch-size", "8", "--dtype", "float64"]
    results = {}
    for s in NAMES:
        net = load_app("alexnet", argv, 2)
        opt = net.optimizer
        trainer = Trainer(net.model, Machine.local(2), make(s, net.model, [0, 1]), opt,
                          executor="local")
        loss = trainer.step(net.synthetic(0, 0))
        results[s] = loss, trainer.weights()
    loss0, w0 = results["data"]
    for s in NAMES[1:]:
        loss, w = results[s]
        assert loss == pytest.approx(loss0, rel=1e-12, abs=1e-12), s
        for k in w0:
            torch.testing.assert_close(w[k], w0[k], rtol=1e-10, atol=1e-12, msg=f"{s} {k}")
