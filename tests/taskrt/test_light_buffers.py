"""Light buffers (InstanceStore.make_light): small buffers of regions nobody reads after
run() are dropped after their last use in the local executor, and outputs of task functions
that return their values (`fresh_outputs`) get storage only when they cannot be adopted.
The values are those of the run where every buffer is a temporary."""
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from parallel_ops import SGD, Model
from taskrt import Machine
from taskrt.executor.instances import LIGHT_LAZY


def _model():
    """A transpose (a non-contiguous output: copied, not adopted; its backward's gradient
    too) between linears, separate ReLUs (outputs and gradients adopted), a reshape (a
    view of its input: kept as a view, Buffer.alias), a layer norm
    (whole rows: its statistics stage returns None, leaving its output unwritten)."""
    m = Model("light", seed=0)
    x = m.input("x", (4, 6, 8), requires_grad=True)
    h = m.relu(m.linear(x, 8))
    h = m.transpose(m.layernorm(h), 1, 2)
    h = m.relu(m.linear(h, 5))
    m.softmax_cross_entropy(m.linear(m.flat(h), 3), m.input("y", (4,), dtype="int64"))
    g = torch.Generator().manual_seed(0)
    return m, {"x": torch.randn(4, 6, 8, generator=g),
               "y": torch.randint(0, 3, (4,), generator=g)}


class _Copies(TorchDispatchMode):
    n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        _Copies.n += func is torch.ops.aten.copy_.default
        return func(*args, **(kwargs or {}))


def _run(monkeypatch, min_bytes: str):
    monkeypatch.setenv("TASKRT_MIN_TEMPORARY_BYTES", min_bytes)
    m, feeds = _model()
    trainer = m.compile(Machine.local(2), None, SGD(lr=0.1, momentum=0.9), executor="local")
    losses = [trainer.step(feeds) for _ in range(2)]
    _Copies.n = 0
    with _Copies():
        losses.append(trainer.step(feeds))
    return trainer, losses, _Copies.n


def test_light_buffers_are_dropped_and_change_no_value(monkeypatch):
    light, losses, copies = _run(monkeypatch, str(1 << 20))     # every buffer is small
    store = light.executor.store
    bufs = [b for group in (store.instances, store.partials) for b in group.values()]
    marked = [b for b in bufs if b.light]
    assert not any(b.region for b in store.temporaries) and marked   # saved states only
    assert any(b.light == LIGHT_LAZY for b in marked)
    assert all(b.tensor is None for b in marked)         # dropped after their last use
    assert all(not b.light for b in bufs if b.region.name in store.kept)
    every, expected, expected_copies = _run(monkeypatch, "0")   # all temporaries
    assert losses == expected
    assert copies == expected_copies        # the reshape's view kept (Buffer.alias), not copied
    for name in light.graph.initial_valid:
        assert torch.equal(light.executor.read(name), every.executor.read(name)), name


def test_light_buffer_is_dropped_after_its_last_real_read(monkeypatch):
    """A backward part's reads of its saved inputs only order it (parallel_ops.tasks:
    order_only_reads; autograd or the op's saved state holds the data): the pre-ReLU output
    of a linear is dropped after the ReLU's forward, as eager PyTorch frees it, not kept
    until the ReLU's backward. The values stay those of the run with every buffer a
    temporary (above, same model)."""
    monkeypatch.setenv("TASKRT_MIN_TEMPORARY_BYTES", str(1 << 20))
    m, feeds = _model()
    trainer = m.compile(Machine.local(1), None, SGD(lr=0.1, momentum=0.9), executor="local")
    ex = trainer.executor
    dropped_by = {b.region.name: ex.graph.nodes[ids[-1]].launch.name
                  for ids, (_, _, free) in zip(ex.entries, ex.plan) for b in free
                  if b.light}
    assert dropped_by["linear_0"] == "relu_0/fwd"
    assert dropped_by["relu_0"] == "layernorm_0/normalize/fwd"
    assert dropped_by["flat_0"] == "linear_2/fwd"
    losses = [trainer.step(feeds) for _ in range(3)]
    monkeypatch.setenv("TASKRT_MIN_TEMPORARY_BYTES", "0")
    m, feeds = _model()
    every = m.compile(Machine.local(1), None, SGD(lr=0.1, momentum=0.9), executor="local")
    assert losses == [every.step(feeds) for _ in range(3)]
