"""The paper's expert strategies (strategy/experts.py) on its apps and cluster shapes: valid
for every app and device count, and shaped as described (one weird trick: data-parallel
convolutions, fully connected layers split on their outputs over all devices; layer per
device: each LSTM layer of a node on its own device, data parallel across nodes)."""
import pytest

from parallel_ops.lowering import resolve_configs
from strategy.costs.app_profile import load_app
from strategy.experts import expert_for, layer_per_device, one_weird_trick
from strategy.machines import machine_model


@pytest.mark.parametrize("preset", ["p100:1", "p100:4", "k80:16"])
@pytest.mark.parametrize("name", ["alexnet", "inception", "resnet", "rnntc", "rnnlm", "nmt"])
def test_every_app_has_a_valid_expert_on_every_cluster_shape(name, preset):
    mm = machine_model(preset)
    net = load_app(name, ["--small"], mm.num_devices)
    configs = expert_for(net, net.model, mm)
    assert configs is not None and set(configs) == {op.name for op in net.model.ops}
    resolve_configs(net.model, configs, mm.taskrt_machine())     # raises if invalid


def test_one_weird_trick_splits_fully_connected_layers_only():
    net = load_app("alexnet", ["--small"], 4)
    cfg = one_weird_trick(net.model, 4, 4)
    for op in net.model.ops:
        degrees = dict(cfg[op.name].degrees)
        first_fc = [o.name for o in net.model.ops].index("fc6")
        if [o.name for o in net.model.ops].index(op.name) < first_fc:
            assert set(degrees) == {"n"}, op.name
        elif op.type == "linear":
            assert set(degrees) == {"o"} and cfg[op.name].devices == (0, 1, 2, 3), op.name
        else:
            assert "n" not in degrees, op.name
    assert dict(cfg["loss"].degrees) == {"c": 4}


def test_layer_per_device_puts_layers_of_a_node_apart_and_replicates_across_nodes():
    net = load_app("rnntc", ["--small"], 16)
    cfg = layer_per_device(net.model, 16, 4)
    lstm = [op.name for op in net.model.ops if op.type == "lstm"]
    slots = [cfg[name].devices[0] for name in lstm]
    assert len(set(slots)) == len(slots) == 4        # 4 layers, 4 devices per node
    for name in lstm:
        devices = cfg[name].devices
        assert dict(cfg[name].degrees) == {"n": 4}
        assert [d % 4 for d in devices] == [devices[0]] * 4       # one slot in every node
        assert sorted(d // 4 for d in devices) == [0, 1, 2, 3]
