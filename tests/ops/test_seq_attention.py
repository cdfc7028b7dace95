"""seq_attention: every legal config (n, t, o) equals Luong attention composed in torch."""
import pytest
import torch

import parallel_ops.seq_attention  # noqa: F401  (attaches model.seq_attention)
from parallel_ops import Adam, Model, ParallelConfig, ShapeError
from oracle import assert_matches, legal_configs, random_feeds

N, TGT, SRC, H, CLASSES = 3, 3, 4, 5, 4


def attention_model(dtype="float64", seed=1):
    m = Model("nmt_attention", seed=seed, dtype=dtype)
    dec = m.input("dec", (N, TGT, H), requires_grad=True)
    enc = m.input("enc", (N, SRC, H), requires_grad=True)
    y = m.input("y", (N, TGT), dtype="int64")
    a = m.seq_attention(dec, enc, name="att")
    m.softmax_cross_entropy(m.linear(a, CLASSES, name="fc"), y, name="loss")
    return m, random_feeds(m, 8, CLASSES)


@pytest.mark.parametrize("cfg", legal_configs(attention_model()[0].op("att"), 4), ids=str)
def test_seq_attention_every_config(cfg):
    m, feeds = attention_model()
    assert_matches(m, feeds, {"att": cfg})


def test_mixed_strategy_with_adam():
    m, feeds = attention_model()
    strategy = {"att": ParallelConfig.of([3, 1, 0, 2], t=2, o=2),
                "fc": ParallelConfig.of([2, 1, 0], n=3)}
    assert_matches(m, feeds, strategy, optimizer=Adam(lr=0.01), steps=3)


def test_init_and_reference_equal_torch():
    m, feeds = attention_model(dtype="float32", seed=21)
    torch.manual_seed(21)
    wc = torch.nn.Linear(2 * H, H, bias=False)
    assert torch.equal(m.initial_values["att.weight"], wc.weight.detach())
    dec, enc = feeds["dec"], feeds["enc"]
    p = torch.softmax(torch.einsum("nth,nsh->nts", dec, enc), dim=-1)
    want = torch.tanh(wc(torch.cat([torch.einsum("nts,nsh->nth", p, enc), dec], dim=-1)))
    got = m.op("att").reference([dec, enc], [wc.weight])[0]
    torch.testing.assert_close(got, want)


def test_shape_errors():
    m = Model()
    dec = m.input("dec", (2, 3, 4))
    with pytest.raises(ShapeError, match=r"seq_attention 'a': decoder 'dec' \(2, 3, 4\) and "
                                         r"encoder 'enc' \(2, 5, 6\) must be"):
        m.seq_attention(dec, m.input("enc", (2, 5, 6)), name="a")
    with pytest.raises(ShapeError, match=r"dtypes differ \(float32 vs float64\)"):
        m.seq_attention(dec, m.input("enc2", (2, 5, 4), dtype="float64"), name="a")
