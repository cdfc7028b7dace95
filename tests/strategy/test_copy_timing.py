"""A copy's timing as the simulator computes it (NodeTimer.copy_timing: one line in the bytes
per (source, destination), from the model's transfer_line) against the model's own answers
per copy (path, transfer_time, a memory copy at memory bandwidth when the path has no
links), bit for bit, on every preset machine and on logical devices sharing a device."""
import random

import pytest

from strategy.costs import CostModel
from strategy.logical_devices import SharedDevices
from strategy.machine_model import PRESETS, machine_model
from strategy.simulator import ROUTE, NodeTimer


def asked_per_copy(model, src: int, dst: int, nbytes: int) -> tuple[float, tuple]:
    """The copy's (seconds, resources) from the model's path and transfer_time (a path of
    several links after ROUTE: they serve it in turn)."""
    links = model.path(src, dst)
    if not links:
        spec = model.device(src)
        return (spec.launch_overhead + 2 * nbytes / spec.memory_bandwidth,
                (NodeTimer(model, CostModel()).compute(src),))
    route = (ROUTE,) if len(links) > 1 else ()
    return model.transfer_time(nbytes, src, dst), route + tuple(links)


MODELS = [f"{name}:2" for name in PRESETS] + ["shared p100:2 x3", "shared dgx-h100:1 x2"]


def model_of(name: str):
    if name.startswith("shared "):
        base, k = name.split()[1:]
        return SharedDevices(machine_model(base), int(k[1:]))
    return machine_model(name)


@pytest.mark.parametrize("name", MODELS)
def test_copy_timing_is_the_models_per_copy_answer(name):
    model = model_of(name)
    timer = NodeTimer(model, CostModel())
    rng = random.Random(name)
    n = model.num_devices
    sizes = [0, 1, 3, 4096, 1 << 20, 12_345_677, 3 << 30]
    for _ in range(400):
        src, dst = rng.randrange(n), rng.randrange(n)
        if rng.random() < 0.1:
            dst = src
        nbytes = rng.choice(sizes) if rng.random() < 0.5 else rng.randrange(1, 1 << 34)
        got = timer.copy_timing(src, dst, nbytes)
        want = asked_per_copy(model, src, dst, nbytes)
        assert got[0] == want[0] and got[1] == want[1], (name, src, dst, nbytes, got, want)


def test_copy_timing_refuses_a_device_the_model_lacks():
    from strategy.machine_model import MachineModelError
    timer = NodeTimer(machine_model("p100:1"), CostModel())
    with pytest.raises(MachineModelError):
        timer.copy_timing(0, 4, 100)
