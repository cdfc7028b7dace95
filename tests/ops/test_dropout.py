"""dropout: one split-independent mask per step, equal to the whole-tensor reference."""
import pytest
import torch

import parallel_ops.dropout  # noqa: F401  (attach builders)
from parallel_ops import Model, ParallelConfig, SGD, ShapeError
from parallel_ops.dropout import keep_mask
from taskrt import Machine, Rect
from oracle import assert_matches, legal_configs, random_feeds

SHAPE = (6, 5)


def net(p=0.5, seed=1):
    m = Model("drop", seed=seed, dtype="float64")
    x = m.input("x", SHAPE, requires_grad=True)
    y = m.input("y", SHAPE[:1], dtype="int64")
    h = m.dropout(x, p, name="drop")
    m.softmax_cross_entropy(m.linear(h, 3, name="fc"), y, name="loss")
    return m, random_feeds(m, 3, 3)


@pytest.mark.parametrize("cfg", legal_configs(net()[0].op("drop"), 4), ids=str)
def test_same_mask_under_every_split(cfg, monkeypatch):
    from parallel_ops.dropout import Dropout
    calls = []
    real = Dropout.backward
    monkeypatch.setattr(Dropout, "backward",
                        lambda self, *a: calls.append(1) or real(self, *a))
    m, feeds = net()
    trainer = assert_matches(m, feeds, {"drop": cfg})     # steps 1 and 2 vs the reference
    assert len(calls) == 2 * len(cfg.devices)   # every part: the op's own backward
    out = trainer.read("drop")
    dropped = out == 0
    assert 0 < int(dropped.sum()) < out.numel()
    assert torch.allclose(out[~dropped], 2 * feeds["x"][~dropped])


def _zeros_per_step(m, feeds, steps=2):
    tr = m.compile(Machine.local(4), {"drop": ParallelConfig.of([2, 0, 3, 1], n=2, a1=2)},
                   SGD(lr=0.1), keep=["drop"])
    masks = []
    for _ in range(steps):
        tr.step(feeds)
        masks.append(tr.read("drop") == 0)
    return masks


def test_new_mask_each_step_and_seed():
    m, feeds = net()
    first, second = _zeros_per_step(m, feeds)
    assert not torch.equal(first, second)
    other_seed = _zeros_per_step(*net(seed=2), steps=1)[0]
    assert not torch.equal(first, other_seed)


def test_mask_of_a_part_is_the_part_of_the_mask():
    shape = (7, 5, 3)
    whole = keep_mask(0, 1, "d", 0.5, shape, Rect.from_shape(shape))
    part = Rect((2, 1, 0), (5, 4, 2))
    assert torch.equal(keep_mask(0, 1, "d", 0.5, shape, part), whole[2:5, 1:4, 0:2])
    assert not torch.equal(whole, keep_mask(0, 1, "e", 0.5, shape, Rect.from_shape(shape)))


@pytest.mark.parametrize("p", [0.1, 0.3, 0.9])
def test_fraction_dropped_is_near_p(p):
    shape = (1000, 1000)
    mask = keep_mask(5, 3, "drop", p, shape, Rect.from_shape(shape))
    assert abs(1 - mask.double().mean().item() - p) < 0.003   # 6 standard deviations


def test_p_zero_and_one():
    shape = (50, 20)
    assert keep_mask(0, 1, "d", 0.0, shape, Rect.from_shape(shape)).all()
    assert not keep_mask(0, 1, "d", 1.0, shape, Rect.from_shape(shape)).any()
    m, feeds = net(p=1.0)
    assert_matches(m, feeds, {"drop": ParallelConfig.of([1, 0], n=2)})
    m, feeds = net(p=0.0)
    trainer = assert_matches(m, feeds, {"drop": ParallelConfig.of([3, 2], a1=2)})
    assert torch.equal(trainer.read("drop"), feeds["x"])


def test_identity_when_not_training():
    m, feeds = net()
    tr = m.compile(Machine.local(4), {"drop": ParallelConfig.of([3, 1, 2], n=3)},
                   training=False, keep=["drop"])
    tr.step(feeds)
    assert torch.equal(tr.read("drop"), feeds["x"])


def test_bad_p():
    m = Model()
    x = m.input("x", (4, 3))
    with pytest.raises(ShapeError, match=r"dropout 'd': p=1.5 is not a probability. Use "
                                         r"0 <= p <= 1"):
        m.dropout(x, 1.5, name="d")


def test_cpu_mask_is_the_hash_of_each_index_bit_for_bit():
    # The CPU path (numpy uint32) against the definition, element by element on Python ints:
    # kept when lowbias32(lowbias32(i ^ key) ^ (i >> 32)) >= p 2**32 (i: the flat index).
    from parallel_ops.dropout import _key, _mix32
    shape = (6, 7, 11)
    rect = Rect((1, 2, 3), (5, 7, 10))
    for p in (0.1, 0.5, 0.9):
        mask = keep_mask(3, 9, "drop", p, shape, rect)
        key = _key(3, 9, "drop")
        for a in range(1, 5):
            for b in range(2, 7):
                for c in range(3, 10):
                    i = (a * 7 + b) * 11 + c
                    kept = _mix32(_mix32(i ^ key) ^ (i >> 32)) >= round(p * 2 ** 32)
                    assert bool(mask[a - 1, b - 2, c - 3]) == kept
