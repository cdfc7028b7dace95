"""A small CNN under a mixed strategy (sample, attribute, parameter and reduction splits on 4
devices) trains like PyTorch step by step: like the ops' references, and like torch.nn."""
import pytest
import torch

import parallel_ops.batchnorm  # noqa: F401  (attach builders)
import parallel_ops.conv2d  # noqa: F401
import parallel_ops.elementwise  # noqa: F401
import parallel_ops.pool2d  # noqa: F401
import parallel_ops.shape  # noqa: F401
from parallel_ops import SGD, Model, ParallelConfig
from taskrt import Machine
from oracle import assert_matches, random_feeds

P = ParallelConfig.of
STRATEGY = {
    "conv1": P([0, 1, 2, 3], n=2, h=2),          # sample x attribute (halos)
    "bn1": P([3, 2, 1, 0], c=2, w=2),            # parameter x attribute (stats stages)
    "relu1": P([1, 3], a1=2),
    "pool1": P([2, 0, 3, 1], h=2, w=2),
    "conv2": P([0, 1, 2, 3], c=2, ci=2),         # parameter x reduction, groups=2
    "pool2": P([1, 2, 3], n=3),                  # a degree that does not divide the batch
    "gap": P([3, 0, 1, 2], c=4),
    "flat": P([0, 2], a1=2),
    "fc": P([2, 1, 0, 3], o=2, i=2),
    "loss": P([2, 3], n=2),
}


def small_cnn():
    m = Model("small_cnn", seed=11, dtype="float64")
    x = m.input("x", (4, 3, 8, 8), requires_grad=True)
    labels = m.input("labels", (4,), dtype="int64")
    h = m.conv2d(x, 6, 3, padding=1, name="conv1")
    h = m.relu(m.batchnorm2d(h, name="bn1"), name="relu1")
    h = m.max_pool2d(h, 2, name="pool1")
    h = m.conv2d(h, 8, (3, 2), padding=(1, 0), groups=2, name="conv2")
    h = m.avg_pool2d(h, 3, stride=1, padding=1, count_include_pad=False, name="pool2")
    h = m.flat(m.adaptive_avg_pool2d(h, 1, name="gap"), name="flat")
    m.softmax_cross_entropy(m.linear(h, 5, name="fc"), labels, name="loss")
    return m, random_feeds(m, 4, 5)


def test_mixed_strategy_equals_op_references():
    m, feeds = small_cnn()
    assert_matches(m, feeds, STRATEGY, steps=3)


def test_mixed_strategy_equals_torch_nn():
    m, feeds = small_cnn()
    torch.manual_seed(11)                         # the same draws as Model(seed=11)
    nn = torch.nn
    ref = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(),
                        nn.MaxPool2d(2), nn.Conv2d(6, 8, (3, 2), padding=(1, 0), groups=2),
                        nn.AvgPool2d(3, 1, 1, count_include_pad=False),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5)).double()
    opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    trainer = m.compile(Machine.local(4), STRATEGY, SGD(lr=0.1, momentum=0.9))
    for step in range(3):
        loss = trainer.step(feeds)
        opt.zero_grad()
        ref_loss = nn.functional.cross_entropy(ref(feeds["x"]), feeds["labels"])
        ref_loss.backward()
        opt.step()
        assert abs(loss - ref_loss.item()) < 1e-10, f"step {step}: {loss} vs {ref_loss.item()}"
    ours = trainer.weights()
    names = {"conv1": ref[0], "bn1": ref[1], "conv2": ref[4], "fc": ref[8]}
    for op, module in names.items():
        for k, v in list(module.named_parameters()) + list(module.named_buffers()):
            if k != "num_batches_tracked":
                assert torch.allclose(ours[f"{op}.{k}"], v.detach(), rtol=1e-8, atol=1e-10), \
                    f"{op}.{k}"
