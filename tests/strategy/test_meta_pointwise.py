"""MetaMemo's pointwise outputs across shapes (strategy/costs/metamemo.py, `_pointwise`): for
every pointwise operator the apps' tasks run while counting, a dtype learned from one call
gives, for random other shapes (broadcast, size-1 dimensions with any strides, 0-d
tensors), exactly the shape, strides, offset and dtype that running torch's meta code
gives; an in-place one returns its self exactly when running it does."""
from __future__ import annotations

import random
import warnings

import pytest
import torch
from bench.sim_speed import random_config
from strategy.costs import CostModel, CostWarning
from strategy.costs import metamemo, work
from strategy.costs.app_profile import load_app
from parallel_ops.workshape import contiguous_strides
from strategy.costs.metamemo import MetaMemo, _pointwise
from strategy.delta import SimulationSession
from strategy.machine_model import machine_model


def _recorded_pointwise_calls(monkeypatch) -> dict:
    """(operator, shape-free signature) -> (operator, args, kwargs) as metadata, of every
    pointwise call the apps' tasks make on meta tensors while counted."""
    calls: dict = {}
    real = MetaMemo.__torch_dispatch__

    def spy(self, func, types, args=(), kwargs=None):
        if metamemo._kind(func) in (metamemo._POINTWISE, metamemo._INPLACE):
            try:
                general = _pointwise(args, kwargs or {})
            except TypeError:
                general = None
            if general is not None and (func, general[0]) not in calls:
                calls[func, general[0]] = (func, [_describe(a) for a in args],
                                           dict(kwargs or {}))
        return real(self, func, types, args, kwargs)
    monkeypatch.setattr(MetaMemo, "__torch_dispatch__", spy)
    # every key counted (declared work, strategy/costs/formulas.py, off): MetaMemo serves
    # counting, the path of operators without declarations
    monkeypatch.setattr(work, "declared_work", lambda node: None)
    rng = random.Random(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CostWarning)
        for app in ("inception", "nmt", "gpt", "transformer"):
            w = load_app(app, ["--small"], devices=4)
            strategy = {op.name: random_config(op, 4, rng) for op in w.model.ops}
            SimulationSession(w.model, machine_model("p100:1"), CostModel(), strategy,
                              w.optimizer)
    monkeypatch.setattr(MetaMemo, "__torch_dispatch__", real)
    return calls


def _describe(a):
    if isinstance(a, torch.Tensor):
        return ("tensor", tuple(a.shape), a.stride(), a.dtype)
    return a


def _tensor(shape, stride, dtype):
    return torch.empty_strided(shape, stride, dtype=dtype, device="meta")


def _variant(args, rng, in_place: bool):
    """The call's arguments with new random shapes: the same ranks, 0-d tensors kept 0-d,
    each dimension either the new broadcast size or 1 (all of it for an in-place
    operator's self), a size-1 dimension's stride at random (standard or not)."""
    ranks = [len(a[1]) for a in args if isinstance(a, tuple) and a and a[0] == "tensor"]
    out = [rng.choice((1, 2, 3, 5, 8)) for _ in range(max(ranks))]
    new = []
    for a in args:
        if not (isinstance(a, tuple) and a and a[0] == "tensor"):
            new.append(a)
            continue
        r = len(a[1])
        whole = in_place and not new
        shape = tuple(1 if rng.random() < 0.3 and not whole else out[len(out) - r + i]
                      for i in range(r))
        stride = list(contiguous_strides(shape))
        for i, d in enumerate(shape):
            if d == 1 and rng.random() < 0.5:
                stride[i] = rng.choice((1, 7, 1000))
        new.append(_tensor(shape, tuple(stride), a[3]))
    return new


def _materialize(args):
    return [_tensor(a[1], a[2], a[3]) if isinstance(a, tuple) and a and a[0] == "tensor"
            else a for a in args]


def _form(t):
    return tuple(t.shape), t.stride(), t.storage_offset(), t.dtype


def test_pointwise_outputs_from_learned_dtypes_equal_running_them(monkeypatch):
    calls = _recorded_pointwise_calls(monkeypatch)
    funcs = {func for func, _ in calls}
    assert len(funcs) >= 10 and torch.ops.aten.add_.Tensor in funcs, sorted(map(str, funcs))
    monkeypatch.setattr(MetaMemo, "TABLE", {})
    monkeypatch.setattr(MetaMemo, "DTYPES", {})
    rng = random.Random(1)
    learned = 0
    for func, args, kwargs in calls.values():
        in_place = metamemo._kind(func) == metamemo._INPLACE
        with MetaMemo():
            func(*_materialize(args), **kwargs)           # learns the dtype
        for _ in range(20):
            new = _variant(args, rng, in_place)
            try:
                want = func(*new, **kwargs)               # torch's meta code, no mode
            except RuntimeError:
                continue                                  # shapes that do not broadcast
            general = _pointwise(new, kwargs)
            with MetaMemo():
                got = func(*new, **kwargs)
            assert _form(got) == _form(want), (func, [_describe(a) for a in new])
            assert (got is new[0]) == (want is new[0]), func
            if general is not None and MetaMemo.DTYPES.get((func, general[0])) is not None:
                learned += 1
    assert learned >= 200, learned


@pytest.mark.parametrize("shapes,strides", [
    (((4, 1, 3), (4, 1, 3)), ((3, 1, 1), (3, 3, 1))),       # a size-1 stride off standard
    (((1, 5), ()), ((5, 1), ())),                           # with a 0-d tensor
    (((2, 1, 1, 3), (1, 6, 1, 1)), ((3, 3, 3, 1), (6, 1, 1, 1))),
])
def test_size_one_dimensions_with_odd_strides(shapes, strides, monkeypatch):
    monkeypatch.setattr(MetaMemo, "TABLE", {})
    monkeypatch.setattr(MetaMemo, "DTYPES", {})
    mul = torch.ops.aten.mul.Tensor
    with MetaMemo():
        mul(_tensor((3, 4), (4, 1), torch.float32), _tensor((3, 4), (4, 1), torch.float32)
            if shapes[1] else _tensor((), (), torch.float32))
    args = [_tensor(s, st, torch.float32) for s, st in zip(shapes, strides)]
    want = mul(*args)
    with MetaMemo():
        got = mul(*args)
    assert _form(got) == _form(want)


def test_a_zero_dim_tensor_promotes_otherwise(monkeypatch):
    """float32 x float64: float32 when the float64 is 0-d, float64 when dimensioned."""
    monkeypatch.setattr(MetaMemo, "TABLE", {})
    monkeypatch.setattr(MetaMemo, "DTYPES", {})
    mul = torch.ops.aten.mul.Tensor
    x = _tensor((3, 4), (4, 1), torch.float32)
    with MetaMemo():
        assert mul(x, _tensor((), (), torch.float64)).dtype == torch.float32
        assert mul(x, _tensor((4,), (1,), torch.float64)).dtype == torch.float64
        assert mul(x, _tensor((), (), torch.float64)).dtype == torch.float32


def test_an_in_place_operator_still_refuses_a_self_smaller_than_the_broadcast(monkeypatch):
    monkeypatch.setattr(MetaMemo, "TABLE", {})
    monkeypatch.setattr(MetaMemo, "DTYPES", {})
    add_ = torch.ops.aten.add_.Tensor
    x = _tensor((3, 4), (4, 1), torch.float32)
    with MetaMemo():
        assert add_(x, _tensor((3, 4), (4, 1), torch.float32)) is x
        with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
            add_(_tensor((1, 4), (4, 1), torch.float32), x)
