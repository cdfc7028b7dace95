"""parallel_ops.tasks._grads: an autograd graph that is a chain of built-in nodes is
differentiated by calling its nodes directly (no engine set-up); the gradients equal the
engine's in every case, including a leaf used twice, a broadcast input, unused and frozen
leaves, and graphs that are not chains or have Python nodes (those go to the engine)."""
import pytest
import torch
import torch.nn.functional as F

from parallel_ops import tasks


class Square(torch.autograd.Function):     # a Python node: not callable directly
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


def _split_second(x):
    return x.split(2, 1)[1]                 # output 1 of a two-output node


CASES = {   # name: (function of x, w, b, c; a chain?)
    "conv": (lambda x, w, b, c: F.conv2d(x, w, b, padding=1), True),
    "relu": (lambda x, w, b, c: torch.relu(x), True),
    "square (x used twice)": (lambda x, w, b, c: x * x, True),
    "broadcast input": (lambda x, w, b, c: x * c, True),
    "conv + relu in place": (lambda x, w, b, c: F.conv2d(x, w, b, padding=1).relu_(), True),
    "conv + tanh, w used twice": (lambda x, w, b, c: torch.tanh(
        F.conv2d(x, w, b, padding=1) * w.sum()), False),
    "chain of three": (lambda x, w, b, c: torch.tanh(F.conv2d(x, w, b, padding=1) * c),
                       True),
    "leaf in two nodes": (lambda x, w, b, c: torch.relu(x * c) * c, True),
    "fan-out (not a chain)": (lambda x, w, b, c: torch.tanh(x) * torch.relu(x), False),
    "two-output node": (lambda x, w, b, c: _split_second(x), False),
    "two-output node inside": (lambda x, w, b, c: torch.relu(_split_second(x)), False),
    "Python node": (lambda x, w, b, c: Square.apply(x), False),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("frozen_weight", [False, True])
def test_same_gradients_as_the_engine(name, frozen_weight):
    fn, chain = CASES[name]
    g = torch.Generator().manual_seed(0)

    def leaf(*shape, grad=True):
        return torch.randn(*shape, generator=g, dtype=torch.float64).requires_grad_(grad)
    x, w, b, c = leaf(2, 3, 5, 5), leaf(3, 3, 3, 3, grad=not frozen_weight), leaf(3), \
        leaf(1, 3, 1, 1)
    targets = [t for t in (x, w, b, c) if t.requires_grad]
    y = fn(x, w, b, c)
    dy = torch.randn(y.shape, generator=g, dtype=torch.float64)
    if not (frozen_weight and "w used twice" in name):
        assert (tasks._chain_grads(y, dy, targets) is not None) == chain
    got = tasks._grads([y], targets, [dy])
    want = torch.autograd.grad(fn(x, w, b, c), targets, dy, allow_unused=True)
    for gg, ww, t in zip(got, want, targets):
        if ww is None:
            assert gg is None
        else:
            assert gg.shape == t.shape and not gg.requires_grad
            assert torch.allclose(gg, ww, rtol=1e-12, atol=1e-12)
