"""clamp, hardtanh (parallel_ops/unary.py) and relu6: every legal config equals PyTorch,
gradients at the bounds included (clamp passes them, hardtanh and relu6 do not); relu6 also
fused into a conv."""
import pytest
import torch

from parallel_ops import Model
from oracle import assert_matches, legal_configs, random_feeds

SHAPE = (5, 3, 4)


def net(build):
    """x -> op -> * x -> fc -> loss; x holds exact bound values so their gradients count."""
    m = Model("clamp", seed=1, dtype="float64")
    x = m.input("x", SHAPE, requires_grad=True)
    h = m.multiply(build(m, x), x, name="mul")
    y = m.input("y", SHAPE[:-1], dtype="int64")
    m.softmax_cross_entropy(m.linear(h, 3, name="fc"), y, name="loss")
    feeds = random_feeds(m, 3, 3)
    x = (feeds["x"] * 4).reshape(-1)
    bounds = torch.tensor([0.0, 6.0, -0.5, 1.0, 2.0, -1.0], dtype=x.dtype)
    x[::5] = bounds.repeat(len(x))[:len(x[::5])]      # every bound the ops below use
    feeds["x"] = x.reshape(SHAPE)
    return m, feeds


OPS = {"clamp": lambda m, x: m.clamp(x, -0.5, 2.0, name="op"),
       "clamp_min": lambda m, x: m.clamp(x, min=0.0, name="op"),
       "hardtanh": lambda m, x: m.hardtanh(x, -1.0, 1.0, name="op"),
       "relu6": lambda m, x: m.relu6(x, name="op")}


@pytest.mark.parametrize("kind, cfg", [(k, c) for k in OPS
                                       for c in legal_configs(net(OPS[k])[0].op("op"), 4)],
                         ids=str)
def test_every_config(kind, cfg):
    m, feeds = net(OPS[kind])
    assert_matches(m, feeds, {"op": cfg})


def test_bounds_get_torchs_gradients():
    x = torch.tensor([-1.0, -0.5, 0.0, 2.0, 6.0, 7.0], dtype=torch.float64)
    m = Model("b", dtype="float64")
    op = m.clamp(m.input("x", (6,)), -0.5, 2.0).producer
    xs = x.clone().requires_grad_(True)
    op.forward(None, [xs], [])[0].sum().backward()
    assert xs.grad.tolist() == [0.0, 1.0, 1.0, 1.0, 0.0, 0.0]    # torch.clamp's


def conv_relu6():
    m = Model("conv_relu6", seed=1, dtype="float64")
    x = m.input("x", (3, 4, 5, 6), requires_grad=True)
    y = m.conv2d(x, 5, 3, padding=1, name="conv", activation="relu6")
    labels = m.input("labels", y.shape[:3], dtype="int64")
    m.softmax_cross_entropy(y, labels, name="loss")
    feeds = random_feeds(m, 3, y.shape[3])
    feeds["x"] = feeds["x"] * 6          # pre-activations on both sides of 0 and 6
    return m, feeds


@pytest.mark.parametrize("cfg", legal_configs(conv_relu6()[0].op("conv"), 4, max_configs=12),
                         ids=str)
def test_conv_relu6_fused(cfg):
    m, feeds = conv_relu6()
    assert m.op("conv").display_type == "conv2d+relu6"
    assert_matches(m, feeds, {"conv": cfg})
