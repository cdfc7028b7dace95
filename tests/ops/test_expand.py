"""expand (parallel_ops/broadcast.py) in the shapes vision models use: every legal config
equals PyTorch (outputs, the summed gradient of the broadcast input, updated weights), for
ViT's class token (1, 1, D) -> (N, 1, D), new leading axes, a per-channel scale
(1, C, 1, 1) -> (N, C, H, W) and a middle axis."""
import pytest

from parallel_ops import Model
from oracle import assert_matches, legal_configs, random_feeds


def net(in_shape, sizes):
    """x (with a gradient) -> expand -> * z -> fc over the last axis -> loss."""
    m = Model("expand", seed=1, dtype="float64")
    x = m.input("x", in_shape, requires_grad=True)
    y = m.expand(x, sizes, name="op")
    z = m.input("z", y.shape, requires_grad=True)
    h = m.multiply(y, z, name="mul")
    labels = m.input("labels", h.shape[:-1], dtype="int64")
    m.softmax_cross_entropy(m.linear(h, 3, name="fc"), labels, name="loss")
    return m, random_feeds(m, 3, 3)


CASES = {"class_token": ((1, 1, 4), (5, 1, 4)),
         "new_axes": ((3, 4), (2, 5, 3, 4)),
         "per_channel": ((1, 3, 1, 1), (2, 3, 3, 4)),
         "middle": ((3, 1, 4), (3, 5, 4))}


@pytest.mark.parametrize("case, cfg", [(c, cfg) for c, (s, z) in CASES.items()
                                       for cfg in legal_configs(net(s, z)[0].op("op"), 4)],
                         ids=str)
def test_every_config(case, cfg):
    m, feeds = net(*CASES[case])
    assert_matches(m, feeds, {"op": cfg})


def test_labels():
    m, _ = net((1, 1, 4), (5, 1, 4))
    op = m.op("op")
    assert op.outputs[0].shape == (5, 1, 4)
    assert op.labels["inputs"] == ((None, "a1", "a2"),)
    m, _ = net((3, 4), (2, 5, 3, 4))
    assert m.op("op").labels["inputs"] == (("a2", "a3"),)
