"""forward_task / backward_task bound per point (parallel_ops.tasks.bind_forward,
bind_backward; taskrt.executor.steps calls a task function's `bind` once per node): the
bound callables give the same bits as the generic task functions, on parts that take an
op's own backward and parts that fall back to autograd (halo padding, straddled groups,
an operator without its own backward), and the executors use them."""
import pytest
import torch

from parallel_ops import tasks
from parallel_ops.tasks import bind_backward

from test_explicit_backward import (STRATEGIES, _assert_same_bits, conv_part_after_forward,
                                    conv_stack)
from oracle import parallel_steps, random_feeds
from parallel_ops import Model, ParallelConfig


def _steps(model, feeds, strategy, bound: bool, calls: dict | None = None):
    """Two training steps, the task functions bound per point or not; `calls` counts the
    generic path's explicit-backward calls (tasks._explicit_grads)."""
    with pytest.MonkeyPatch.context() as mp:
        if not bound:
            mp.setattr(tasks.forward_task, "bind", None)
            mp.setattr(tasks.backward_task, "bind", None)
        if calls is not None:
            real = tasks._explicit_grads

            def counted(*args):
                calls["generic"] = calls.get("generic", 0) + 1
                return real(*args)
            mp.setattr(tasks, "_explicit_grads", counted)
        records, _ = parallel_steps(model, feeds, strategy, steps=2)
    return records


@pytest.mark.parametrize("strategy", STRATEGIES, ids=str)
@pytest.mark.parametrize("activation", [None, "relu", "tanh"])
def test_bound_same_bits_as_generic(strategy, activation):
    groups = 2 if strategy == "channels straddling groups" else 1
    m, feeds = conv_stack(activation, groups=groups)
    bound_calls: dict = {}
    bound = _steps(m, feeds, STRATEGIES[strategy], True, bound_calls)
    m2, _ = conv_stack(activation, groups=groups)
    generic_calls: dict = {}
    generic = _steps(m2, feeds, STRATEGIES[strategy], False, generic_calls)
    _assert_same_bits(bound, generic)
    # The executor ran the bound callables: the generic explicit path ran only unbound.
    assert bound_calls.get("generic", 0) == 0 < generic_calls["generic"]


def _mixed():
    """Separate ReLU and tanh operators (own backward), a conv of whole inputs, a matmul
    by a weight through linear, and a softmax over channels (autograd or own backward)."""
    m = Model("bound_mixed", seed=2, dtype="float32")
    x = m.input("x", (4, 3, 6, 6), requires_grad=True)
    h = m.relu(m.conv2d(x, 4, 3, padding=1, name="c1"), name="r1")
    h = m.tanh(m.conv2d(h, 4, 1, name="c2"), name="t2")
    h = m.flat(m.adaptive_avg_pool2d(h, 1, name="pool"), name="flat")
    m.softmax_cross_entropy(m.linear(h, 5, name="fc"), m.input("y", (4,), dtype="int64"))
    return m, random_feeds(m, 5, 5)


@pytest.mark.parametrize("strategy", [{}, {"c1": ParallelConfig.of([0, 1], h=2),
                                           "fc": ParallelConfig.of([1, 0], o=2),
                                           "r1": ParallelConfig.of([2, 3], n=2)}],
                         ids=["default", "split"])
def test_bound_same_bits_on_mixed_operators(strategy):
    m, feeds = _mixed()
    bound = _steps(m, feeds, strategy, True)
    m2, _ = _mixed()
    _assert_same_bits(bound, _steps(m2, feeds, strategy, False))


def test_bound_backward_without_output_gradient_gives_zero_gradients():
    """A bound backward part that reads no output gradient falls back to backward_task's
    zero gradients, and takes the saved state."""
    ctx, bctx, (xv, wv, bv) = conv_part_after_forward("zero_bound")
    grads = bind_backward(bctx)(xv, wv, bv, None, None, None)
    assert [tuple(g.shape) for g in grads] == [(2, 3, 5, 5), (4, 3, 3, 3), (4,)]
    assert all(not g.any() for g in grads)
    assert ctx.saved is None
