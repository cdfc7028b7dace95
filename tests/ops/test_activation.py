"""Activations fused into conv2d, linear and batchnorm2d (parallel_ops/activation.py):
every legal config equals PyTorch's operator followed by the activation (outputs,
gradients, updated weights); one launch per stage instead of two; a fused operator keeps its
reduction dim whole, with a clear error and without it in the search space."""
import pytest
import torch

import parallel_ops.batchnorm  # noqa: F401  (attaches model.batchnorm2d)
import parallel_ops.conv2d  # noqa: F401  (attaches model.conv2d)
import parallel_ops.elementwise
from parallel_ops import ConfigError, Model, ParallelConfig, ShapeError
from strategy.space import SearchSpace
from strategy.standard import random_config
from taskrt import Machine
from oracle import assert_matches, legal_configs, random_feeds


def conv_model(activation, dtype="float64"):
    m = Model("conv_act", seed=1, dtype=dtype)
    x = m.input("x", (3, 4, 7, 6), requires_grad=True)
    y = m.conv2d(x, 5, (3, 2), stride=(2, 1), padding=(1, 1), name="conv",
                 activation=activation)
    labels = m.input("labels", y.shape[:3], dtype="int64")
    m.softmax_cross_entropy(y, labels, name="loss")
    return m, random_feeds(m, 3, y.shape[3])


def mlp(activation, dtype="float64"):
    m = Model("mlp_act", seed=1, dtype=dtype)
    x = m.input("x", (6, 7), requires_grad=True)
    y = m.input("y", (6,), dtype="int64")
    h = m.linear(x, 6, name="fc1", activation=activation)
    m.softmax_cross_entropy(m.linear(h, 5, name="fc2"), y, name="loss")
    return m, random_feeds(m, 3, 5)


def bn_model(activation, dtype="float64"):
    m = Model("bn_act", seed=1, dtype=dtype)
    x = m.input("x", (3, 4, 3, 5), requires_grad=True)
    y = m.batchnorm2d(x, name="bn", activation=activation)
    labels = m.input("labels", y.shape[:3], dtype="int64")
    m.softmax_cross_entropy(y, labels, name="loss")
    return m, random_feeds(m, 3, y.shape[3])


@pytest.mark.parametrize("cfg", legal_configs(conv_model("relu")[0].op("conv"), 4), ids=str)
def test_conv_relu_every_config(cfg):
    m, feeds = conv_model("relu")
    assert_matches(m, feeds, {"conv": cfg})


@pytest.mark.parametrize("activation", ["gelu", "tanh", "sigmoid"])
@pytest.mark.parametrize("cfg", legal_configs(conv_model("relu")[0].op("conv"), 4,
                                              max_configs=4, seed=1), ids=str)
def test_conv_other_activations(activation, cfg):
    m, feeds = conv_model(activation)
    assert_matches(m, feeds, {"conv": cfg})


@pytest.mark.parametrize("activation", ["relu", "gelu", "tanh", "sigmoid"])
@pytest.mark.parametrize("cfg", legal_configs(mlp("relu")[0].op("fc1"), 4, max_configs=8),
                         ids=str)
def test_linear_every_activation(activation, cfg):
    m, feeds = mlp(activation)
    assert_matches(m, feeds, {"fc1": cfg})


@pytest.mark.parametrize("cfg", legal_configs(bn_model("relu")[0].op("bn"), 4, max_configs=12),
                         ids=str)
def test_batchnorm_relu(cfg):
    m, feeds = bn_model("relu")
    assert_matches(m, feeds, {"bn": cfg})


def test_batchnorm_relu_evaluation():
    m = Model("bn_eval", seed=1, dtype="float64")
    y = m.batchnorm2d(m.input("x", (3, 4, 3, 5)), name="bn", activation="relu")
    trainer = m.compile(Machine.local(2), {"bn": ParallelConfig.of([0, 1], h=2)},
                        training=False)
    x = torch.randn(3, 4, 3, 5, dtype=torch.float64)
    trainer.step({"x": x})
    want = torch.relu(torch.nn.functional.batch_norm(x, torch.zeros(4, dtype=torch.float64),
                                                     torch.ones(4, dtype=torch.float64),
                                                     training=False))
    assert torch.allclose(trainer.read(y.name), want, rtol=1e-12, atol=1e-12)


def test_one_launch_instead_of_two():
    fused, _ = conv_model("relu")
    trainer = fused.compile(Machine.local(2), None)
    names = [l.name for l in trainer.lowered.launches]
    assert "conv/fwd" in names and "conv/bwd" in names
    assert not any("relu" in n for n in names)
    assert fused.op("conv").cost_tag != conv_model(None)[0].op("conv").cost_tag


def test_reduction_dim_stays_whole():
    m, _ = conv_model("relu")
    op = m.op("conv")
    assert [d.name for d in op.dims if d.whole] == ["ci"]
    assert not any(d.whole for d in conv_model(None)[0].op("conv").dims)
    with pytest.raises(ConfigError, match=r"conv2d 'conv'.*degree 2 on 'ci': it must stay "
                                          r"whole \(the fused activation 'relu' needs whole "
                                          r"sums.*relu an operator of its own \(model.relu"
                                          r"\(...\), or import_module\(..., "
                                          r"fuse_activations=False\)\)"):
        m.compile(Machine.local(4), {"conv": ParallelConfig.of([0, 1], ci=2)})
    space = SearchSpace(m, 4)
    ci = [d.name for d in op.dims].index("ci")
    assert all(t[ci] == 1 for t in space.degree_tuples(op))
    assert any(t[ci] > 1 for t in SearchSpace(conv_model(None)[0], 4).degree_tuples(
        conv_model(None)[0].op("conv")))
    import random
    rng = random.Random(0)
    assert all(random_config(op, range(4), rng).degree("ci") == 1 for _ in range(200))
    mlp_model, _ = mlp("gelu")
    with pytest.raises(ConfigError, match=r"linear 'fc1'.*degree 2 on 'i': it must stay whole"):
        mlp_model.compile(Machine.local(4), {"fc1": ParallelConfig.of([0, 1], i=2)})


def test_unknown_activation_is_refused():
    m = Model()
    x = m.input("x", (2, 3, 4, 4))
    with pytest.raises(ShapeError, match=r"conv2d 'c': activation 'swish' is not supported. "
                                         r"Use one of \[('\w+', )*'relu', ('\w+', )*'tanh'\]"):
        m.conv2d(x, 2, 3, name="c", activation="swish")
    with pytest.raises(ShapeError, match=r"linear 'l': activation 'Relu'"):
        m.linear(m.input("h", (2, 3)), 2, name="l", activation="Relu")
    with pytest.raises(ShapeError, match=r"batchnorm2d 'b': activation 1"):
        m.batchnorm2d(x, name="b", activation=1)


def residual_model(activation, dtype="float64"):
    m = Model("res_act", seed=1, dtype=dtype)
    a = m.input("a", (4, 3, 5), requires_grad=True)
    b = m.input("b", (4, 3, 5), requires_grad=True)
    y = m.add(a, b, name="sum", activation=activation)
    m.softmax_cross_entropy(y, m.input("labels", (4, 3), dtype="int64"), name="loss")
    return m, random_feeds(m, 3, 5)


@pytest.mark.parametrize("cfg", legal_configs(residual_model("relu")[0].op("sum"), 4,
                                              max_configs=10), ids=str)
def test_add_relu(cfg):
    m, feeds = residual_model("relu")
    assert_matches(m, feeds, {"sum": cfg})


def test_only_add_and_multiply_take_an_activation():
    m = Model()
    x = m.input("x", (2, 3))
    m.multiply(x, x, name="sq", activation="tanh")
    with pytest.raises(ShapeError, match=r"tanh 't': only add and multiply take a fused "
                                         r"activation; apply relu as an operator of its own"):
        m.add_op(parallel_ops.elementwise.Elementwise(m, "tanh", [x], "t", "relu"))


@pytest.mark.parametrize("cfg", [ParallelConfig.of([0, 1], c=2),
                                 ParallelConfig.of([2, 0, 1], c=3),
                                 ParallelConfig.of([0, 1, 2, 3], c=2, h=2)], ids=str)
def test_conv_relu_parts_straddling_groups(cfg):
    """Parts whose output channels span groups slice their convolution's output: the
    in-place ReLU then runs on a view."""
    m = Model("groups_act", seed=1, dtype="float64")
    x = m.input("x", (2, 6, 5, 5), requires_grad=True)
    y = m.conv2d(x, 9, 3, padding=1, groups=3, name="conv", activation="relu")
    m.softmax_cross_entropy(y, m.input("labels", y.shape[:3], dtype="int64"), name="loss")
    assert_matches(m, random_feeds(m, 3, y.shape[3]), {"conv": cfg})
