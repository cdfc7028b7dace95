"""timm's ResNet, ViT, ConvNeXt and MobileNetV2 (and the same blocks in plain torch, which
run where timm cannot be imported) import unchanged and train equal to eager PyTorch under
data parallel and two model-parallel strategies on 4 logical devices: float64 to 1e-9,
float32 to 1e-3 relative (see FLOAT32 below)."""
import copy
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import assert_state_close, imported_steps, torch_steps  # noqa: E402
from vision_nets import MODELS, SOURCES, STRATEGIES, TIMM_SKIP, build, strategy  # noqa: E402
from parallel_ops import SGD  # noqa: E402
from parallel_ops.importer import import_module  # noqa: E402
from taskrt import Machine  # noqa: E402

DEVICES = 4
# float32: the imported model sums in other orders (parts, partial sums), so results
# differ from eager by rounding. Measured worst after 2 SGD steps (attribute strategy):
# losses 8.1e-6 relative, weights 6.3e-6 absolute (the plain-torch ResNet); timm's
# MobileNetV2, where rounding decides, is held to eager's own accuracy instead (below).
FLOAT32 = dict(rtol=1e-3, atol=1e-4)


def _need(source):
    if source == "timm" and TIMM_SKIP:
        pytest.skip(TIMM_SKIP)


def _train(name, source, kind, dtype=torch.float64, method="auto", steps=2):
    module, inputs, labels = build(name, source, dtype)
    opt = SGD(lr=0.05, momentum=0.9)
    want, want_state = torch_steps(module, inputs, labels, copy.deepcopy(opt), steps)
    imp = import_module(module, inputs, method=method)
    plan = strategy(imp.model, kind, list(range(DEVICES)))
    got, state, imp, trainer = imported_steps(module, inputs, labels, plan,
                                              Machine.local(DEVICES), copy.deepcopy(opt), steps,
                                              method)
    return want, want_state, got, state, imp, trainer, plan


CASES = [(m, s, k) for m in MODELS for s in SOURCES for k in STRATEGIES]


@pytest.mark.parametrize("name,source,kind", CASES, ids=["-".join(c) for c in CASES])
def test_trains_equal_to_eager_float64(name, source, kind):
    _need(source)
    want, want_state, got, state, imp, trainer, plan = _train(name, source, kind)
    if kind != "data_parallel":
        assert len(plan) >= 5, plan               # the strategy splits many operators
    assert got == pytest.approx(want, rel=1e-9)
    assert_state_close(state, want_state, rtol=1e-9, atol=1e-9, where=f"{name}/{source}/{kind}")
    target = imp.write_back(trainer, copy.deepcopy(build(name, source)[0]))
    assert_state_close(target.state_dict(), want_state, rtol=1e-9, atol=1e-9, where="write_back")


FLOAT32_CASES = [(m, s) for m in MODELS for s in SOURCES]


def _distance(a, b):
    """The largest absolute difference between two state dicts' float tensors."""
    return max((a[k].double() - b[k].double()).abs().max().item() for k in b
               if b[k].is_floating_point())


@pytest.mark.parametrize("name,source", FLOAT32_CASES)
def test_trains_equal_to_eager_float32(name, source):
    """Equal to eager float32 within FLOAT32 where eager float32 itself is that close to
    float64. Where it is not, rounding decides the result, and the imported run must be
    as accurate as eager's: no further from float64 (losses and weights) than twice eager
    float32's own distance. timm's mobilenetv2_035 is such a model: its first SGD step is
    large, and at step 2 its batch norms see near-constant channels and its ReLU6s
    values at their kinks. Measured after 2 steps (attribute strategy): eager float32 is
    0.64 from float64 in the weights (loss 16.8497 against 16.8419); the import is 0.40
    from float64 and 0.64 from eager float32 (loss 16.8412). Before batch norm rounded as
    torch's (parallel_ops/batchnorm.py) it was 6.5 away (loss 15.51)."""
    _need(source)
    want, want_state, got, state, *_ = _train(name, source, "attribute", torch.float32)
    module, inputs, labels = build(name, source)
    exact, exact_state = torch_steps(module, inputs, labels, SGD(lr=0.05, momentum=0.9), 2)
    if all(torch.allclose(want_state[k].double(), v, **FLOAT32)
           for k, v in exact_state.items() if v.is_floating_point()):
        assert got == pytest.approx(want, rel=FLOAT32["rtol"])
        assert_state_close(state, want_state, where=f"{name}/{source}/float32", **FLOAT32)
        return
    eager_losses = max(abs(a - b) for a, b in zip(want, exact))
    assert max(abs(a - b) for a, b in zip(got, exact)) <= 2 * eager_losses, (got, want, exact)
    eager_weights = _distance(want_state, exact_state)
    assert _distance(state, exact_state) <= 2 * eager_weights, \
        f"imported float32 is {_distance(state, exact_state):.3e} from float64, eager " \
        f"float32 {eager_weights:.3e}"


@pytest.mark.parametrize("name,source", [(m, s) for m in MODELS for s in SOURCES])
def test_export_capture_trains_equal_too(name, source):
    _need(source)
    want, want_state, got, state, imp, *_ = _train(name, source, "parameter", method="export")
    assert imp.method == "export"
    assert got == pytest.approx(want, rel=1e-9)
    assert_state_close(state, want_state, rtol=1e-9, atol=1e-9)


def test_the_operators_the_models_need():
    types = {n: {op.display_type for op in import_module(*build(n)[:2]).model.ops}
             for n in MODELS}
    assert {"expand", "split", "sdpa", "concat"} <= types["vit"]
    assert {"broadcast_multiply", "parameter", "linear+gelu"} <= types["convnext"]
    assert "batchnorm2d+relu6" in types["mobilenetv2"]
