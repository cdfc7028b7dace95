"""Pointwise silu, rsqrt, ... and cast between float dtypes: every legal config equals
PyTorch (cast: the gradient comes back in the input's dtype)."""
import pytest
import torch

import parallel_ops.cast  # noqa: F401  (attach builders)
import parallel_ops.unary  # noqa: F401
from parallel_ops import Model, ShapeError
from parallel_ops.unary import FUNCTIONS
from oracle import assert_matches, legal_configs

SHAPE = (4, 3, 2)


def net(fn):
    m = Model(fn, seed=1, dtype="float64")
    x = m.input("x", SHAPE, requires_grad=True)
    y = m.input("y", SHAPE[:1], dtype="int64")
    if fn == "cast":
        h = m.cast(m.cast(x, "float32", name="op"), "float64", name="back")
    else:
        h = m.unary(fn, x, name="op")
    m.softmax_cross_entropy(m.linear(m.reshape(h, (4, 6), name="r"), 3, name="fc"), y,
                            name="loss")
    g = torch.Generator().manual_seed(3)
    x0 = torch.randn(*SHAPE, generator=g, dtype=torch.float64)
    if fn in ("rsqrt", "sqrt", "log"):
        x0 = x0.abs() + 0.5
    return m, {"x": x0, "y": torch.randint(0, 3, SHAPE[:1], generator=g)}


CASES = [(fn, cfg) for fn in sorted(FUNCTIONS) + ["cast"]
         for cfg in legal_configs(net(fn)[0].op("op"), 4, max_configs=5)]


@pytest.mark.parametrize("fn,cfg", CASES, ids=[f"{f}-{c}" for f, c in CASES])
def test_every_config(fn, cfg):
    tol = {"rtol": 1e-6, "atol": 1e-7} if fn == "cast" else {}
    assert_matches(*net(fn), {"op": cfg}, **tol)


def test_cast_output_dtype_and_errors():
    m, _ = net("cast")
    assert m.op("op").outputs[0].dtype == "float32"
    idx = m.input("i", (4,), dtype="int64")
    with pytest.raises(ShapeError, match="cast 'c': 'i' int64 to float32"):
        m.cast(idx, "float32", name="c")
    with pytest.raises(ShapeError, match="unknown function 'erf'"):
        m.unary("erf", m.inputs[0])
