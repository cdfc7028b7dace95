"""Property test: whatever a custom operator's body does, its gradients are PyTorch's.

Operator bodies are drawn at random from steps that broadcast (weights, keepdim reductions,
expand), go through views (reshape, transpose, unsqueeze), work in place (on fresh tensors,
on slices), change dtype, use the input twice, and return one output, two, or an output
that aliases the input. Each body is checked twice:
- the mechanism alone: `parallel_ops.tasks._grads` (the runtime's backward of one part,
  which calls a chain's autograd nodes itself) against `torch.autograd.grad`;
- end to end: the body as a custom Op trained under every legal config on 4 logical devices
  against plain PyTorch (loss, outputs, every gradient, updated weights; tests/ops/oracle.py).
The runtime once skipped the engine's reduction of a broadcast gradient between nodes:
`x * x.sum(-1, keepdim=True)` got an input gradient off by a relative 0.66, with no error.
"""
import random
from types import SimpleNamespace

import pytest
import torch

from oracle import assert_matches, legal_configs, random_feeds
from parallel_ops import PARAMETER, SAMPLE, Dim, Model, Op, tasks

N, S, F = 3, 2, 4            # batch, a dim that also splits a weight, features (kept whole)


def _inplace_mul(h, e):
    h = h * 1.5
    return h.mul_(e.w)


def _inplace_slice(h, e):
    h = h * 1.0
    h[..., :1] = h[..., 1:2].sigmoid()
    return h


def _clamp_inplace(h, e):
    return (h * 1.0).clamp_(-1.5, 1.5)


STEPS = {   # name: a row-local function of h (…, s, F) and the part's x, w (F,), v (s, 1)
    "keepdim sum": lambda h, e: h * h.sum(-1, keepdim=True),
    "rmsnorm": lambda h, e: h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * e.w,
    "weight broadcast": lambda h, e: h * e.w + e.v,
    "expand weight": lambda h, e: h + e.w.expand(h.shape),
    "expand column": lambda h, e: h * e.v.expand(h.shape[1], h.shape[2]),
    "weight to scalar": lambda h, e: h * e.w.sum(),
    "softmax": lambda h, e: torch.softmax(h, -1),
    "max shift": lambda h, e: h - h.amax(-1, keepdim=True),
    "view flip": lambda h, e: h.reshape(*h.shape[:-1], -1, 2).flip(-1).reshape(h.shape),
    "transpose": lambda h, e: h.transpose(0, 1).tanh().transpose(0, 1),
    "unsqueeze broadcast": lambda h, e: (h.unsqueeze(2) * torch.ones(1, 1, 3, 1,
                                                                     dtype=h.dtype)).sum(2),
    "in place": _inplace_mul,
    "in place slice": _inplace_slice,
    "clamp in place": _clamp_inplace,
    "input twice": lambda h, e: h + e.x * 0.5,
    "sigmoid": lambda h, e: torch.sigmoid(h) * 2,
    "dtype round trip": lambda h, e: (h.float() * 2).to(h.dtype),
}
OUTPUTS = ("one", "two", "alias input", "alias input view")


def draw_body(seed):
    """(steps, outputs mode) of a random body."""
    rng = random.Random(seed)
    return tuple(rng.choice(list(STEPS)) for _ in range(rng.randint(1, 4))), \
        rng.choice(OUTPUTS)


def run_body(body, x, w, v):
    steps, mode = body
    e = SimpleNamespace(x=x, w=w, v=v)
    h = x
    for name in steps:
        h = STEPS[name](h, e)
    if mode == "one":
        return [h]
    if mode == "two":
        return [h, torch.tanh(h).sum(-1, keepdim=True).expand(h.shape)]
    return [x if mode == "alias input" else x.view(x.shape), h]


def _leaves(seed, n=N, s=S):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g, dtype=torch.float64).requires_grad_()
            for shape in ((n, s, F), (F,), (s, 1))]


BODIES = [draw_body(seed) for seed in range(300)]


def _ids(bodies):
    return [f"{i}:{'+'.join(b[0])}->{b[1]}" for i, b in enumerate(bodies)]


@pytest.mark.parametrize("body", BODIES, ids=_ids(BODIES))
def test_part_gradients_equal_autograd(body):
    """tasks._grads on one part, as backward_task calls it, equals torch.autograd.grad."""
    leaves = _leaves(0)
    outs = run_body(body, *leaves)
    g = torch.Generator().manual_seed(1)
    dys = [torch.randn(o.shape, generator=g, dtype=o.dtype) for o in outs]
    got = tasks._grads(outs, leaves, dys)
    again = _leaves(0)
    want = torch.autograd.grad(run_body(body, *again), again, dys, allow_unused=True)
    for name, a, b, t in zip(("x", "w", "v"), got, want, leaves):
        if b is None:
            assert a is None, f"{name}: a gradient where autograd has none"
            continue
        assert a is not None, f"{name}: no gradient where autograd has one"
        assert a.shape == t.shape and a.dtype == t.dtype, name
        err = ((a - b).norm() / b.norm().clamp_min(1e-300)).item()
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-12), \
            f"{name}: relative error {err:.3g} against torch.autograd.grad"


def test_the_bug_it_guards_against_is_drawn():
    """The draws include the body of the reported bug (a keepdim reduction broadcast back),
    alone as a chain, so the test above covers it."""
    assert (("keepdim sum",), "one") in BODIES
    x = _leaves(0)[0]
    y = x * x.sum(-1, keepdim=True)
    assert tasks._chain_grads(y, torch.ones_like(y), [x]) is not None   # the direct path


class RandomBody(Op):
    """A custom operator whose forward is a drawn body: dims n (sample) and s (parameter:
    splits v), features whole; w replicated on every part."""
    type = "random_body"

    def __init__(self, model, x, body, name):
        super().__init__(model.unique_name("body", name))
        self.body = body
        self.inputs = [x]
        model.new_weight(self, "w", (F,))
        model.new_weight(self, "v", (S, 1))
        outs = 1 if body[1] == "one" else 2
        for k in range(outs):
            model.new_tensor(self, (N, S, F), suffix=f".{k}" if k else "")
        self.dims = (Dim("n", SAMPLE, N), Dim("s", PARAMETER, S))
        self.labels = {"inputs": (("n", "s", None),),
                       "weights": ((None,), ("s", None)),
                       "outputs": (("n", "s", None),) * outs}

    def forward(self, spec, inputs, weights):
        return run_body(self.body, inputs[0], *weights)

    def reference(self, inputs, weights):
        # The oracle reads each output's gradient from the tensor it returned: an output that
        # is the input object itself would report the input's gradient, so it gets a view.
        return [o.view_as(o) if o is inputs[0] else o
                for o in run_body(self.body, inputs[0], *weights)]

    def init_weights(self, generator):
        return [torch.randn(F, generator=generator), torch.randn(S, 1, generator=generator)]


def build(body):
    m = Model("random_body", seed=0, dtype="float64")
    x = m.input("x", (N, S, F), requires_grad=True)
    y = m.input("y", (N, S), dtype="int64")
    op = m.add_op(RandomBody(m, x, body, "body"))
    h = op.outputs[0] if len(op.outputs) == 1 else m.add(*op.outputs, name="sum")
    m.softmax_cross_entropy(h, y, name="loss")
    return m, random_feeds(m, 0, F)


END_TO_END = BODIES[:48]


@pytest.mark.parametrize("body", END_TO_END, ids=_ids(END_TO_END))
def test_every_config_trains_as_pytorch(body):
    m, feeds = build(body)
    for cfg in legal_configs(m.op("body"), 4):
        m, feeds = build(body)
        assert_matches(m, feeds, {"body": cfg})
