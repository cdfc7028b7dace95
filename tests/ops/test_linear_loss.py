"""linear and softmax cross-entropy: every legal config equals PyTorch."""
import pytest
import torch

from parallel_ops import Adam, ConfigError, Model, ParallelConfig, SGD, ShapeError
from oracle import assert_matches, legal_configs, random_feeds


def mlp(dtype="float64", lead=(6,), classes=5):
    m = Model("mlp", seed=1, dtype=dtype)
    x = m.input("x", (*lead, 7), requires_grad=True)
    y = m.input("y", lead, dtype="int64")
    h = m.linear(x, 6, name="fc1")
    logits = m.linear(h, classes, name="fc2")
    m.softmax_cross_entropy(logits, y, name="loss")
    return m, random_feeds(m, 3, classes)


@pytest.mark.parametrize("cfg", legal_configs(mlp()[0].op("fc1"), 4), ids=str)
def test_linear_every_config(cfg):
    m, feeds = mlp()
    assert_matches(m, feeds, {"fc1": cfg}, num_devices=4)


@pytest.mark.parametrize("cfg", legal_configs(mlp(lead=(4, 3))[0].op("fc1"), 4,
                                              max_configs=16), ids=str)
def test_linear_of_3d_input_every_config(cfg):
    """A (batch, sequence, features) input: contiguous parts take the flattened product and
    its own backward (parallel_ops/linear.py), the others autograd."""
    m, feeds = mlp(lead=(4, 3))
    assert_matches(m, feeds, {"fc1": cfg}, num_devices=4)


@pytest.mark.parametrize("cfg", legal_configs(mlp()[0].op("loss"), 4), ids=str)
def test_loss_every_config(cfg):
    m, feeds = mlp()
    assert_matches(m, feeds, {"loss": cfg, "fc2": ParallelConfig.of([3], n=1)}, num_devices=4)


def test_linear_with_sequence_axis_and_adam():
    m, feeds = mlp(lead=(4, 3))
    strategy = {"fc1": ParallelConfig.of([0, 1, 2, 3], n=2, s1=2),
                "fc2": ParallelConfig.of([2, 0], o=2),
                "loss": ParallelConfig.of([1, 2, 3], s1=3)}
    assert_matches(m, feeds, strategy, optimizer=Adam(lr=0.01), steps=3)


def test_bad_config_is_refused_with_names():
    m, _ = mlp()
    from taskrt import Machine
    with pytest.raises(ConfigError, match=r"linear 'fc1'.*degree 9 on 'o' exceeds its extent 6"):
        m.compile(Machine.local(4), {"fc1": ParallelConfig.of(list(range(9)), o=9)}, SGD())
    with pytest.raises(ConfigError, match=r"3 devices .* for 2 parts"):
        m.compile(Machine.local(4), {"fc1": ParallelConfig.of([0, 1, 2], n=2)}, SGD())
    with pytest.raises(ConfigError, match=r"devices \[7\] do not exist"):
        m.compile(Machine.local(4), {"fc1": ParallelConfig.of([0, 7], n=2)}, SGD())
    with pytest.raises(ConfigError, match=r"unknown dim 'q'"):
        m.compile(Machine.local(4), {"fc1": ParallelConfig.of([0, 1], q=2)}, SGD())
    with pytest.raises(ConfigError, match=r"does not have"):
        m.compile(Machine.local(4), {"nope": ParallelConfig.of([0], n=1)}, SGD())


def test_shape_errors():
    m = Model()
    x = m.input("x", (4, 3))
    y = m.input("y", (5,), dtype="int64")
    with pytest.raises(ShapeError, match="labels 'y' have shape"):
        m.softmax_cross_entropy(m.linear(x, 2), y)


def test_float32_bit_identical_runs():
    m, feeds = mlp(dtype="float32")
    feeds = {"x": feeds["x"].float(), "y": feeds["y"]}
    s = {"fc1": ParallelConfig.of([0, 1, 2, 3], n=2, i=2), "loss": ParallelConfig.of([3, 1], c=2)}
    from taskrt import Machine
    runs = []
    for _ in range(2):
        tr = m.compile(Machine.local(4), s, SGD(lr=0.1, momentum=0.9))
        losses = [tr.step(feeds) for _ in range(3)]
        runs.append((losses, tr.weights()))
    assert runs[0][0] == runs[1][0]
    for k in runs[0][1]:
        assert torch.equal(runs[0][1][k], runs[1][1][k])


@pytest.mark.parametrize("cfg", [None, ParallelConfig.of([0, 1], c=2),
                                  ParallelConfig.of([0, 1], n=2)], ids=str)
@pytest.mark.parametrize("label", [5, -1])
def test_labels_out_of_range_are_an_error(cfg, label):
    from taskrt import Machine
    from taskrt.errors import ExecutionError
    m, feeds = mlp()
    tr = m.compile(Machine.local(2), {"loss": cfg} if cfg else {}, SGD(lr=0.1))
    y = feeds["y"].clone()
    y[-1] = label
    seen = "from -1 to" if label < 0 else "to 5."
    with pytest.raises(ExecutionError, match=r"loss/loss/fwd.*labels must be in \[0, 5\); "
                                             rf"got values .*{seen}"):
        tr.step({**feeds, "y": y})
