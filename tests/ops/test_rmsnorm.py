"""rmsnorm: every legal config (sample and sequence splits) equals PyTorch, with and
without HF's float32 upcast; equal to torch.nn.RMSNorm and HF Llama's formula."""
import pytest
import torch

import parallel_ops.rmsnorm  # noqa: F401  (attach builders)
from parallel_ops import Model, ShapeError
from parallel_ops.rmsnorm import rms_norm
from oracle import assert_matches, legal_configs

SHAPE = (4, 3, 5)


def net(compute_dtype=None, affine=True):
    m = Model("rms", seed=1, dtype="float64")
    x = m.input("x", SHAPE, requires_grad=True)
    y = m.input("y", SHAPE[:-1], dtype="int64")
    h = m.rmsnorm(x, 1e-6, affine, compute_dtype, name="op")
    m.softmax_cross_entropy(m.linear(h, 3, name="fc"), y, name="loss")
    g = torch.Generator().manual_seed(3)
    if affine:
        m.initial_values["op.weight"] = 1 + 0.3 * torch.randn(5, generator=g,
                                                              dtype=torch.float64)
    feeds = {"x": 2 + 3 * torch.randn(*SHAPE, generator=g, dtype=torch.float64),
             "y": torch.randint(0, 3, SHAPE[:-1], generator=g)}
    return m, feeds


def test_dims_are_sample_and_sequence():
    op = net()[0].op("op")
    assert [str(d) for d in op.dims] == ["n:sample", "s1:attribute"]


@pytest.mark.parametrize("cfg", legal_configs(net()[0].op("op"), 4), ids=str)
def test_every_config(cfg):
    assert_matches(*net(), {"op": cfg})


@pytest.mark.parametrize("cfg", legal_configs(net()[0].op("op"), 4, max_configs=4), ids=str)
def test_every_config_with_float32_upcast_and_without_weight(cfg):
    assert_matches(*net("float32"), {"op": cfg}, rtol=1e-6, atol=1e-8)
    assert_matches(*net(affine=False), {"op": cfg})


def test_formula_equals_torch_rmsnorm():
    x = torch.randn(2, 3, 5, dtype=torch.float64)
    ref = torch.nn.RMSNorm(5, eps=1e-6, dtype=torch.float64)
    with torch.no_grad():
        ref.weight.uniform_()
    assert torch.allclose(rms_norm(x, ref.weight, 1e-6), ref(x), rtol=1e-12)


def test_bad_compute_dtype_is_named():
    m = Model("rms")
    x = m.input("x", SHAPE)
    with pytest.raises(ShapeError, match="rmsnorm 'r': compute_dtype 'int8'"):
        m.rmsnorm(x, compute_dtype="int8", name="r")
