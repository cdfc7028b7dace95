"""broadcast_add / broadcast_multiply of any broadcastable shapes, and expand: every legal
config equals PyTorch (the broadcast operand's gradient summed over the splits)."""
import pytest
import torch

import parallel_ops.broadcast  # noqa: F401  (attach builders)
from parallel_ops import Model, ShapeError
from oracle import assert_matches, legal_configs

PAIRS = {"mask": ((4, 3, 2, 5), (4, 1, 2, 5)),       # scores + (N, 1, S, S)
         "row_stat": ((4, 3, 5), (4, 3, 1)),          # x * rsqrt(mean) (N, S, 1)
         "both": ((4, 1, 5), (1, 3, 1))}              # each operand broadcasts


def net(kind, fn="add"):
    a_shape, b_shape = PAIRS[kind]
    m = Model("bc", seed=1, dtype="float64")
    a = m.input("a", a_shape, requires_grad=True)
    b = m.input("b", b_shape, requires_grad=True)
    y = m.input("y", (4,), dtype="int64")
    h = getattr(m, f"broadcast_{fn}")(a, b, name="op")
    flat = m.reshape(h, (4, _inner(h.shape)), name="r")
    m.softmax_cross_entropy(m.linear(flat, 3, name="fc"), y, name="loss")
    g = torch.Generator().manual_seed(3)
    feeds = {"a": torch.randn(*a_shape, generator=g, dtype=torch.float64),
             "b": torch.randn(*b_shape, generator=g, dtype=torch.float64),
             "y": torch.randint(0, 3, (4,), generator=g)}
    return m, feeds


def _inner(shape):
    n = 1
    for s in shape[1:]:
        n *= s
    return n


CASES = [(k, fn, cfg) for k in PAIRS for fn in ("add", "multiply")
         for cfg in legal_configs(net(k)[0].op("op"), 4, max_configs=12)]


@pytest.mark.parametrize("kind,fn,cfg", CASES, ids=[f"{k}-{f}-{c}" for k, f, c in CASES])
def test_every_config(kind, fn, cfg):
    assert_matches(*net(kind, fn), {"op": cfg})


def expand_net():
    m = Model("ex", seed=1, dtype="float64")
    x = m.input("x", (4, 2, 1, 3), requires_grad=True)      # GQA: (N, KV, 1, S*D)
    y = m.input("y", (4,), dtype="int64")
    h = m.expand(x, (4, 2, 3, 3), name="op")
    m.softmax_cross_entropy(m.linear(m.reshape(h, (4, 18), name="r"), 3, name="fc"), y,
                            name="loss")
    g = torch.Generator().manual_seed(4)
    return m, {"x": torch.randn(4, 2, 1, 3, generator=g, dtype=torch.float64),
               "y": torch.randint(0, 3, (4,), generator=g)}


@pytest.mark.parametrize("cfg", legal_configs(expand_net()[0].op("op"), 4), ids=str)
def test_expand_every_config(cfg):
    assert_matches(*expand_net(), {"op": cfg})


def test_errors_name_the_operator():
    m = Model("bad")
    a, b = m.input("a", (4, 3)), m.input("b", (4, 2))
    with pytest.raises(ShapeError, match="broadcast_add 'op': shapes"):
        m.broadcast_add(a, b, name="op")
    with pytest.raises(ShapeError, match="expand 'e': 'a' \\(4, 3\\) cannot expand"):
        m.expand(a, (4, 6), name="e")
