"""Lowering corner cases: a tensor used twice by one operator, replay consistency."""
import torch

import parallel_ops  # noqa: F401
from oracle import assert_matches, random_feeds
from parallel_ops import Model, ParallelConfig


def test_tensor_used_twice_by_one_op_sums_both_gradients():
    m = Model("twice", seed=0, dtype="float64")
    x = m.input("x", (4, 3), requires_grad=True)
    y = m.input("y", (4,), dtype="int64")
    h = m.linear(x, 3, name="fc")
    sq = m.multiply(h, h, name="sq")
    m.softmax_cross_entropy(m.linear(sq, 2, name="out"), y, name="loss")
    feeds = random_feeds(m, 0, 2)
    for cfg in (None, ParallelConfig.of([1, 0], n=2), ParallelConfig.of([2, 3], a1=2)):
        assert_matches(m, feeds, {"sq": cfg} if cfg else {})


def test_one_point_reducing_twice_into_one_rect_sums_both():
    from taskrt import IndexLaunch, LocalExecutor, Machine, Rect, Region, RegionRequirement, plan
    from taskrt.privilege import R, RED
    a, b = Region("a", (4,), "float64"), Region("b", (4,), "float64")
    full = Rect((0,), (4,))

    def twice(ctx, x, g1, g2):
        return x * 2, x * 3
    launch = IndexLaunch("twice", twice, (1,), lambda c: (
        RegionRequirement(a, full, R), RegionRequirement(b, full, RED),
        RegionRequirement(b, full, RED)))
    read = IndexLaunch("read", lambda ctx, v: (), (1,), lambda c: (RegionRequirement(b, full, R),))
    g = plan([launch, read], Machine.local(1), initial={a: [(full, 0)]})
    ex = LocalExecutor(g)
    ex.write(a, torch.arange(4.0, dtype=torch.float64))
    ex.run()
    assert torch.equal(ex.read(b), torch.arange(4.0, dtype=torch.float64) * 5)


def test_evaluator_and_trainer_of_one_model_keep_their_modes():
    from taskrt import Machine
    from parallel_ops import SGD
    m = Model("modes", seed=0, dtype="float64")
    x = m.input("x", (8, 16))
    y = m.input("y", (8,), dtype="int64")
    h = m.dropout(m.linear(x, 16, name="fc"), 0.5, name="drop")
    m.softmax_cross_entropy(m.linear(h, 3, name="out"), y, name="loss")
    feeds = random_feeds(m, 0, 3)
    trainer = m.compile(Machine.local(2), None, SGD(lr=0.0), keep=["drop"])
    evaluator = m.compile(Machine.local(2), None, None, training=False, keep=["drop", "fc"])
    evaluator.step(feeds)
    trainer.step(feeds)
    dropped = trainer.read("drop")
    assert (dropped == 0).sum() > 0                       # training mode still drops
    evaluator.step(feeds)
    assert torch.equal(evaluator.read("drop"), evaluator.read("fc"))   # eval is identity
