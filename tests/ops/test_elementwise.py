"""relu, gelu, tanh, sigmoid, add, multiply: every legal config equals PyTorch."""
import pytest

import parallel_ops.elementwise  # noqa: F401  (attach builders)
from parallel_ops import Model, ParallelConfig, ShapeError
from oracle import assert_matches, legal_configs, random_feeds

SHAPE = (5, 3, 2)      # 5 and 3 do not divide by every degree


def chain(dtype="float64"):
    """x -> relu -> gelu -> gelu(tanh) -> tanh -> sigmoid -> *x -> square -> +b -> fc -> loss."""
    m = Model("ew", seed=1, dtype=dtype)
    x = m.input("x", SHAPE, requires_grad=True)
    b = m.input("b", SHAPE[-1:], requires_grad=True)
    y = m.input("y", SHAPE[:-1], dtype="int64")
    h = m.relu(x, name="relu")
    h = m.gelu(h, name="gelu")
    h = m.gelu(h, approximate="tanh", name="gelu_tanh")
    h = m.tanh(h, name="tanh")
    h = m.sigmoid(h, name="sigmoid")
    h = m.multiply(h, x, name="mul")
    h = m.multiply(h, h, name="square")
    h = m.add(h, b, name="add_b")
    m.softmax_cross_entropy(m.linear(h, 4, name="fc"), y, name="loss")
    return m, random_feeds(m, 3, 4)


OPS = ("relu", "gelu", "gelu_tanh", "tanh", "sigmoid", "mul", "square", "add_b")


def test_dims_and_labels():
    m, _ = chain()
    op = m.op("add_b")
    assert [str(d) for d in op.dims] == ["n:sample", "a1:attribute", "a2:attribute"]
    assert op.labels["inputs"] == (("n", "a1", "a2"), ("a2",))
    assert len(m.op("square").inputs) == 1        # x * x reads x once


@pytest.mark.parametrize("cfg", legal_configs(chain()[0].op("relu"), 4), ids=str)
def test_every_config(cfg):
    m, feeds = chain()
    assert_matches(m, feeds, {name: cfg for name in OPS})


def test_neighbours_with_different_configs():
    m, feeds = chain()
    strategy = {"relu": ParallelConfig.of([3, 1], a1=2),
                "gelu": ParallelConfig.of([0, 1, 2], n=3),
                "gelu_tanh": ParallelConfig.of([2, 3], a2=2),
                "tanh": ParallelConfig.of([1, 0, 3, 2], n=2, a2=2),
                "sigmoid": ParallelConfig.of([0], n=1),
                "mul": ParallelConfig.of([3, 2, 1], a1=3),
                "square": ParallelConfig.of([2, 1, 0, 3], n=4),
                "add_b": ParallelConfig.of([1, 3, 0, 2], n=2, a1=2),
                "fc": ParallelConfig.of([0, 2], o=2)}
    assert_matches(m, feeds, strategy)


def test_float32_matches():
    m, feeds = chain(dtype="float32")
    feeds = {k: v.float() if v.is_floating_point() else v for k, v in feeds.items()}
    cfg = ParallelConfig.of([3, 0, 2, 1], n=2, a1=2)
    assert_matches(m, feeds, {name: cfg for name in OPS}, rtol=1e-5, atol=1e-6)


def test_shape_errors():
    m = Model()
    x = m.input("x", (4, 3, 2))
    with pytest.raises(ShapeError, match=r"add 'bad': shapes \(4, 3, 2\) of 'x' and \(3,\) "
                                         r"of 'z' do not match.*\(2,\)"):
        m.add(x, m.input("z", (3,)), name="bad")
    with pytest.raises(ShapeError, match=r"multiply 'bad2': shapes .* of 'w' do not match"):
        m.multiply(x, m.input("w", (4, 3, 2, 1)), name="bad2")
    with pytest.raises(ShapeError, match=r"'x' \(float32\) and 'i' \(int64\) have different "
                                         "dtypes"):
        m.multiply(x, m.input("i", (4, 3, 2), dtype="int64"))
    with pytest.raises(ShapeError, match=r"gelu: approximate='fast' is not supported. Use "
                                         "'none' or 'tanh'"):
        m.gelu(x, approximate="fast")
