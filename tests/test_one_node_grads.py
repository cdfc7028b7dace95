"""parallel_ops.tasks._grads: a one-node autograd graph is differentiated by calling its node
directly (no engine set-up); the gradients equal the engine's in every case, including a
leaf used twice, a broadcast input, unused and frozen leaves, and deeper graphs (engine)."""
import pytest
import torch
import torch.nn.functional as F

from parallel_ops import tasks

CASES = {   # name: (function of x, w, b, c; a graph of one node?)
    "conv": (lambda x, w, b, c: F.conv2d(x, w, b, padding=1), True),
    "relu": (lambda x, w, b, c: torch.relu(x), True),
    "square (x used twice)": (lambda x, w, b, c: x * x, True),
    "broadcast input": (lambda x, w, b, c: x * c, True),
    "deeper graph": (lambda x, w, b, c: torch.tanh(F.conv2d(x, w, b, padding=1)), False),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("frozen_weight", [False, True])
def test_same_gradients_as_the_engine(name, frozen_weight):
    fn, one_node = CASES[name]
    g = torch.Generator().manual_seed(0)

    def leaf(*shape, grad=True):
        return torch.randn(*shape, generator=g, dtype=torch.float64).requires_grad_(grad)
    x, w, b, c = leaf(2, 3, 5, 5), leaf(3, 3, 3, 3, grad=not frozen_weight), leaf(3), \
        leaf(1, 3, 1, 1)
    targets = [t for t in (x, w, b, c) if t.requires_grad]
    y = fn(x, w, b, c)
    dy = torch.randn(y.shape, generator=g, dtype=torch.float64)
    assert (tasks._one_node_grads(y, dy, targets) is not None) == one_node
    got = tasks._grads([y], targets, [dy])
    want = torch.autograd.grad(fn(x, w, b, c), targets, dy, allow_unused=True)
    for gg, ww, t in zip(got, want, targets):
        if ww is None:
            assert gg is None
        else:
            assert gg.shape == t.shape and not gg.requires_grad
            assert torch.allclose(gg, ww, rtol=1e-12, atol=1e-12)
