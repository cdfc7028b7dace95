"""bmm: every legal config (b, m, n, k) equals torch.bmm / torch.matmul."""
import pytest

import parallel_ops.matmul  # noqa: F401  (attaches model.bmm)
from parallel_ops import Adam, Model, ParallelConfig, ShapeError
from oracle import assert_matches, legal_configs, random_feeds

CLASSES = 4


def product_model(lead=(3,), m_=3, k_=3, n_=3, a_grad=True):
    m = Model("bmm", seed=2, dtype="float64")
    a = m.input("a", (*lead, m_, k_), requires_grad=a_grad)
    b = m.input("b", (*lead, k_, n_), requires_grad=True)
    y = m.input("y", (*lead, m_), dtype="int64")
    c = m.bmm(a, b, name="mm")
    m.softmax_cross_entropy(m.linear(c, CLASSES, name="fc"), y, name="loss")
    return m, random_feeds(m, 4, CLASSES)


@pytest.mark.parametrize("cfg", legal_configs(product_model()[0].op("mm"), 4), ids=str)
def test_bmm_every_config(cfg):
    m, feeds = product_model()
    assert_matches(m, feeds, {"mm": cfg})


def test_bmm_two_batch_axes_with_adam():
    m, feeds = product_model(lead=(2, 3), m_=2, k_=3, n_=2, a_grad=False)
    assert [str(d) for d in m.op("mm").dims] == ["b:sample", "b1:attribute", "m:attribute",
                                                  "n:attribute", "k:reduction"]
    strategy = {"mm": ParallelConfig.of([3, 0, 2, 1], b1=2, k=2),
                "fc": ParallelConfig.of([1, 2], n=2)}
    assert_matches(m, feeds, strategy, optimizer=Adam(lr=0.01), steps=3)


def test_shape_errors():
    m = Model()
    a = m.input("a", (2, 3, 4))
    with pytest.raises(ShapeError, match=r"bmm 'mm': shapes \(2, 3, 4\) and \(2, 5, 6\) do not "
                                         r"chain: .* contracted axis 4 vs 5"):
        m.bmm(a, m.input("b", (2, 5, 6)), name="mm")
    with pytest.raises(ShapeError, match=r"batch axes \(2,\) vs \(3,\)"):
        m.bmm(a, m.input("b2", (3, 4, 6)), name="mm")
    with pytest.raises(ShapeError, match=r"must both be \(B, \.\.\., M, K\)"):
        m.bmm(m.input("v", (3, 4)), m.input("w", (4, 6)), name="mm")
    with pytest.raises(ShapeError, match=r"operand dtypes differ \(float32 vs float64\)"):
        m.bmm(a, m.input("b3", (2, 4, 6), dtype="float64"), name="mm")
