"""multihead_attention: every legal config (n, s, h) equals torch.nn.MultiheadAttention."""
import pytest
import torch

import parallel_ops.attention  # noqa: F401  (attaches model.multihead_attention)
from parallel_ops import Adam, Model, ParallelConfig, ShapeError
from oracle import assert_matches, legal_configs, random_feeds

N, S, E, HEADS, CLASSES = 3, 4, 6, 3, 4


def attention_model(causal=False, dtype="float64", seed=1):
    m = Model("mha", seed=seed, dtype=dtype)
    x = m.input("x", (N, S, E), requires_grad=True)
    y = m.input("y", (N, S), dtype="int64")
    a = m.multihead_attention(x, HEADS, causal=causal, name="att")
    m.softmax_cross_entropy(m.linear(a, CLASSES, name="fc"), y, name="loss")
    return m, random_feeds(m, 6, CLASSES)


@pytest.mark.parametrize("cfg", legal_configs(attention_model()[0].op("att"), 4), ids=str)
def test_attention_every_config(cfg):
    m, feeds = attention_model()
    assert_matches(m, feeds, {"att": cfg})


@pytest.mark.parametrize("cfg", legal_configs(attention_model(True)[0].op("att"), 4,
                                              max_configs=12, seed=1), ids=str)
def test_causal_attention_configs(cfg):
    m, feeds = attention_model(causal=True)
    assert_matches(m, feeds, {"att": cfg})


def test_causal_part_reads_keys_up_to_its_last_query():
    op = attention_model(causal=True)[0].op("att")
    spec = op.part((1, 2, 1), (0, 0, 0))
    assert spec.inputs[0].hi == (N, 2, E) and spec.info == (0, 2)
    spec = op.part((1, 2, 2), (0, 1, 1))
    assert spec.inputs[0].hi == (N, S, E) and spec.weights[3].empty


def test_mixed_strategy_with_adam():
    m, feeds = attention_model(causal=True)
    strategy = {"att": ParallelConfig.of([2, 0, 3, 1], n=2, h=2),
                "fc": ParallelConfig.of([1, 3], s1=2)}
    assert_matches(m, feeds, strategy, optimizer=Adam(lr=0.01), steps=3)


@pytest.mark.parametrize("causal", [False, True])
def test_init_and_output_equal_torch_module(causal):
    m, feeds = attention_model(causal=causal, dtype="float32", seed=9)
    torch.manual_seed(9)
    ref = torch.nn.MultiheadAttention(E, HEADS, batch_first=True)
    iv = m.initial_values
    assert torch.equal(iv["att.in_proj_weight"].reshape(3 * E, E), ref.in_proj_weight.detach())
    assert torch.equal(iv["att.in_proj_bias"].reshape(3 * E), ref.in_proj_bias.detach())
    assert torch.equal(iv["att.out_proj_weight"].reshape(E, E), ref.out_proj.weight.detach())
    assert torch.equal(iv["att.out_proj_bias"], ref.out_proj.bias.detach())
    with torch.no_grad():
        ref.in_proj_bias.normal_()          # nonzero biases, so their layout is checked too
        ref.out_proj.bias.normal_()
    x = feeds["x"]
    mask = torch.ones(S, S, dtype=torch.bool).triu(1) if causal else None
    want, _ = ref(x, x, x, need_weights=False, attn_mask=mask)
    weights = [ref.in_proj_weight.reshape(3, HEADS, E // HEADS, E),
               ref.in_proj_bias.reshape(3, HEADS, E // HEADS),
               ref.out_proj.weight.reshape(E, HEADS, E // HEADS), ref.out_proj.bias]
    torch.testing.assert_close(m.op("att").reference([x], weights)[0], want)


def test_shape_errors():
    m = Model()
    with pytest.raises(ShapeError, match=r"multihead_attention 'a': embed_dim 6 is not "
                                         "divisible by num_heads 4"):
        m.multihead_attention(m.input("x", (2, 3, 6)), 4, name="a")
    with pytest.raises(ShapeError, match=r"input 'v' has shape \(2, 6\); it needs \(batch, "
                                         r"sequence, embed_dim\)"):
        m.multihead_attention(m.input("v", (2, 6)), 2, name="a")
