"""Mixed precision and Adam in the memory model: bytes per parameter counted by hand against
the planned buffers, partitioned with the weights, and against the executor's measured peak.

bfloat16 with Adam(master_weights=True): weight 2 + gradient 2 + master 4 + two moments 4 + 4
= 16 bytes per parameter; float32 Adam without master weights: 4 + 4 + 4 + 4 = 16 as well, but
activations take half the bytes under bfloat16.
"""
from __future__ import annotations

import pytest
import torch

from parallel_ops import SGD, Adam, Model, ParallelConfig
from strategy.simulator import memory_per_device
from taskrt import Machine

WIDTH, BATCH = 64, 4


def mlp(dtype: str) -> Model:
    m = Model("mlp", seed=0, dtype=dtype)
    x = m.input("x", (BATCH, WIDTH))
    y = m.input("y", (BATCH,), dtype="int64")
    h = m.linear(x, WIDTH, name="fc1", activation="gelu")
    m.softmax_cross_entropy(m.linear(h, WIDTH, name="fc2"), y, name="loss")
    return m


def feeds(dtype: str):
    g = torch.Generator().manual_seed(1)
    return {"x": torch.randn(BATCH, WIDTH, generator=g).to(getattr(torch, dtype)),
            "y": torch.randint(0, WIDTH, (BATCH,), generator=g)}


def bytes_by_role(trainer, device: int) -> dict[str, int]:
    """Bytes of the instances on `device` of weights, their gradients and optimizer states."""
    weights = {w.name: w for w in trainer.model.weights}
    out = {"weight": 0, "grad": 0}
    for (name, dev), rect in trainer.graph.instance_rects.items():
        base, _, role = name.partition("@")
        if dev == device and base in weights:
            role = role or "weight"
            out[role] = out.get(role, 0) + trainer.graph.regions[name].nbytes(rect)
    return out


def parameters(model) -> int:
    return sum(torch.Size(w.shape).numel() for w in model.weights)


@pytest.mark.parametrize("dtype,optimizer,per_param", [
    ("bfloat16", Adam(master_weights=True),
     {"weight": 2, "grad": 2, "master": 4, "exp_avg": 4, "exp_avg_sq": 4}),
    ("float32", Adam(), {"weight": 4, "grad": 4, "exp_avg": 4, "exp_avg_sq": 4}),
    ("bfloat16", SGD(lr=0.1, momentum=0.9, master_weights=True),
     {"weight": 2, "grad": 2, "master": 4, "momentum_buffer": 4}),
])
def test_bytes_per_parameter_by_hand(dtype, optimizer, per_param):
    model = mlp(dtype)
    tr = model.compile(Machine.local(1), {}, optimizer, executor="local")
    p = parameters(model)
    assert bytes_by_role(tr, 0) == {k: v * p for k, v in per_param.items()}
    assert sum(per_param.values()) == 16 if optimizer.__class__ is Adam else 14


def test_state_is_partitioned_with_its_weight():
    model = mlp("bfloat16")
    split = {"fc1": ParallelConfig.of([0, 1], o=2), "fc2": ParallelConfig.of([0, 1], i=2)}
    tr = model.compile(Machine.local(2), split, Adam(master_weights=True), executor="local")
    whole = {w.name: torch.Size(w.shape).numel() for w in model.weights}
    # fc1's weight and bias and fc2's weight in halves; fc2's bias whole on device 0 (the
    # part that adds it to the row-parallel partial sums)
    half = (whole["fc1.weight"] + whole["fc1.bias"] + whole["fc2.weight"]) // 2
    for d, params in ((0, half + whole["fc2.bias"]), (1, half)):
        roles = bytes_by_role(tr, d)
        assert roles == {"weight": 2 * params, "grad": 2 * params, "master": 4 * params,
                         "exp_avg": 4 * params, "exp_avg_sq": 4 * params}


def test_measured_peak_on_cpu_equals_the_model_and_counts_16_bytes_per_parameter():
    model = mlp("bfloat16")
    tr = model.compile(Machine.local(1), {}, Adam(master_weights=True), executor="local")
    tr.step(feeds("bfloat16"))
    measured = tr.executor.store.bytes_per_device()[0]
    n = len(tr.graph.nodes)
    assert measured == memory_per_device(tr.graph, list(range(n)), list(range(1, n + 1)))[0]
    assert measured >= 16 * parameters(model)
    fp32 = mlp("float32")
    tr32 = fp32.compile(Machine.local(1), {}, Adam(), executor="local")
    tr32.step(feeds("float32"))
    # same 16 bytes per parameter; activations (and the input) take twice the bytes in fp32
    assert 0 < measured - 16 * parameters(model) < tr32.executor.store.bytes_per_device()[0] \
        - 16 * parameters(fp32)


def test_master_weights_take_a_float32_adam_step_and_round_to_the_bfloat16_weight():
    model = mlp("bfloat16")
    opt = Adam(lr=1e-2, master_weights=True)
    tr = model.compile(Machine.local(1), {}, opt, executor="local", keep="all")
    w0 = model.initial_values["fc1.weight"].clone()
    tr.step(feeds("bfloat16"))
    grad = tr.read("fc1.weight@grad")
    master = tr.read("fc1.weight@master")
    assert (grad.dtype, master.dtype) == (torch.bfloat16, torch.float32)
    ref = w0.float().requires_grad_()
    ref.grad = grad.float()
    torch.optim.Adam([ref], lr=1e-2, foreach=False).step()
    assert torch.equal(master, ref.detach())
    assert torch.equal(tr.read("fc1.weight"), ref.detach().to(torch.bfloat16))
