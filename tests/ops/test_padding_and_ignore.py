"""What HF models with padding need: embedding(padding_idx) (that row gets no gradient,
also with the vocabulary split), cross-entropy ignoring label -100 (mean over the others,
also with samples and classes split), and input_function (a mask computed from an integer
input, each part keeping its block): every legal config equals PyTorch."""
import pytest
import torch

from parallel_ops import Model
from parallel_ops.importer.input_function import InputFunction
from oracle import assert_matches, legal_configs, oracle_machine


def embedding_net():
    m = Model("emb", seed=1, dtype="float64")
    idx = m.input("idx", (4, 3), dtype="int64")
    y = m.input("y", (4, 3), dtype="int64")
    h = m.embedding(idx, 7, 4, name="op", padding_idx=2)
    m.softmax_cross_entropy(m.linear(h, 3, name="fc"), y, name="loss")
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 7, (4, 3), generator=g)
    ids[:, -1] = 2                                     # padded positions
    return m, {"idx": ids, "y": torch.randint(0, 3, (4, 3), generator=g)}


@pytest.mark.parametrize("cfg", legal_configs(embedding_net()[0].op("op"), 4, max_configs=12),
                         ids=str)
def test_embedding_padding_idx_every_config(cfg):
    m, feeds = embedding_net()
    trainer = assert_matches(m, feeds, {"op": cfg})
    w0 = m.initial_values["op.weight"]
    assert torch.equal(trainer.weights()["op.weight"][2], w0[2])   # no update of row 2


def ignore_net():
    m = Model("ce", seed=1, dtype="float64")
    x = m.input("x", (4, 3, 5), requires_grad=True)
    y = m.input("y", (4, 3), dtype="int64")
    m.softmax_cross_entropy(x, y, name="op", ignore_index=-100)
    g = torch.Generator().manual_seed(4)
    labels = torch.randint(0, 5, (4, 3), generator=g)
    labels[:, -1] = -100                               # a causal LM's last position
    labels[2, 0] = -100
    return m, {"x": torch.randn(4, 3, 5, generator=g, dtype=torch.float64), "y": labels}


@pytest.mark.parametrize("cfg", legal_configs(ignore_net()[0].op("op"), 4), ids=str)
def test_cross_entropy_ignore_index_every_config(cfg):
    m, feeds = ignore_net()
    assert_matches(m, feeds, {"op": cfg}, optimizer=None)
    x, y = feeds["x"], feeds["y"]
    want = torch.nn.functional.cross_entropy(x.reshape(-1, 5), y.reshape(-1))
    assert m.op("op").reference([x, y], [])[0].item() == pytest.approx(want.item(), rel=1e-12)


def _mask_of(attention_mask):
    """HF-style: (N, S) -> (N, 1, S, S), causal and key padding, via indexing by arange."""
    n, s = attention_mask.shape
    keys = attention_mask.bool()[torch.arange(n)[:, None, None, None],
                                 torch.arange(s)[None, None, None, :]]
    return keys & torch.ones(s, s, dtype=torch.bool).tril()


def mask_net():
    m = Model("mask", seed=1, dtype="float64")
    am = m.input("am", (4, 3), dtype="int64")
    example = torch.ones(4, 3, dtype=torch.int64)
    m.add_op(InputFunction(m, [am], _mask_of, _mask_of(example), name="op"))
    feeds = {"am": torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]])}
    return m, feeds


@pytest.mark.parametrize("cfg", legal_configs(mask_net()[0].op("op"), 4, max_configs=12),
                         ids=str)
def test_input_function_every_config(cfg):
    m, feeds = mask_net()
    trainer = m.compile(oracle_machine(4), {"op": cfg}, None, keep=["op"])
    trainer.step(feeds)
    assert torch.equal(trainer.read("op"), _mask_of(feeds["am"]))


def test_input_function_recomputes_when_its_sources_change(monkeypatch):
    """The result is reused while the sources hold the same values and recomputed when one
    changes: each step's mask is the one of that step's feed."""
    m, feeds = mask_net()
    op = m.op("op")
    calls = []
    monkeypatch.setattr(op, "fn", lambda am: calls.append(1) or _mask_of(am))
    trainer = m.compile(oracle_machine(4), {"op": legal_configs(op, 4)[1]}, None,
                        keep=["op"])
    other = {"am": torch.tensor([[1, 0, 0], [1, 1, 1], [1, 1, 0], [1, 1, 1]])}
    per_step = []
    for step, feed in enumerate([feeds, feeds, other, other, feeds]):
        before = len(calls)
        trainer.step(feed)
        per_step.append(len(calls) - before)
        assert torch.equal(trainer.read("op"), _mask_of(feed["am"])), f"step {step}"
    assert per_step == [1, 0, 1, 0, 1]       # the oracle's devices are all the CPU
