"""embedding: every legal config (n, s1, d, v) equals torch.nn.Embedding."""
import pytest
import torch

import parallel_ops.embedding  # noqa: F401  (attaches model.embedding)
from parallel_ops import Adam, Model, ParallelConfig, SGD, ShapeError
from taskrt import Machine
from taskrt.errors import ExecutionError
from oracle import assert_matches, legal_configs

VOCAB, DIM, CLASSES = 7, 5, 4


def tagger(lead=(3, 3), dtype="float64", seed=1):
    m = Model("tagger", seed=seed, dtype=dtype)
    idx = m.input("idx", lead, dtype="int64")
    y = m.input("y", lead, dtype="int64")
    e = m.embedding(idx, VOCAB, DIM, name="emb")
    m.softmax_cross_entropy(m.linear(e, CLASSES, name="fc"), y, name="loss")
    g = torch.Generator().manual_seed(5)
    feeds = {"idx": torch.randint(0, VOCAB, lead, generator=g),
             "y": torch.randint(0, CLASSES, lead, generator=g)}
    return m, feeds


@pytest.mark.parametrize("cfg", legal_configs(tagger()[0].op("emb"), 4), ids=str)
def test_embedding_every_config(cfg):
    m, feeds = tagger()
    assert_matches(m, feeds, {"emb": cfg})


def test_embedding_one_index_axis_with_adam():
    m, feeds = tagger(lead=(5,))
    strategy = {"emb": ParallelConfig.of([3, 1, 0], v=3), "fc": ParallelConfig.of([2, 0], o=2)}
    assert_matches(m, feeds, strategy, optimizer=Adam(lr=0.01), steps=3)


def test_init_equals_torch_embedding():
    m, _ = tagger(dtype="float32", seed=11)
    torch.manual_seed(11)
    ref = torch.nn.Embedding(VOCAB, DIM)
    assert torch.equal(m.initial_values["emb.weight"], ref.weight.detach())


def test_out_of_range_index_is_reported():
    m, feeds = tagger()
    feeds["idx"][1, 2] = VOCAB
    trainer = m.compile(Machine.local(4), {"emb": ParallelConfig.of([0, 1], v=2)}, SGD())
    with pytest.raises(ExecutionError, match=r"embedding 'emb': indices must lie in \[0, 7\) "
                                             r"\(got min \d+, max 7\)"):
        trainer.step(feeds)


def test_shape_errors():
    m = Model()
    x = m.input("x", (4, 3))
    with pytest.raises(ShapeError, match="embedding 'e': indices 'x' must be an integer tensor, "
                                         "not float32"):
        m.embedding(x, 5, 2, name="e")
    idx = m.input("idx", (4,), dtype="int64")
    with pytest.raises(ShapeError, match=r"num_embeddings 0 and embedding_dim 2 must both be "
                                         "positive"):
        m.embedding(idx, 0, 2, name="e")
