"""Ops with their own backward (Op.explicit_backward: conv2d, linear, the activation
operators) give the same bits as autograd on their forward: conv2d for every activation,
with and without bias, on parts that take the explicit path and parts that fall back to
autograd (halo padding, straddled groups); linear under sample, output and input-feature
splits, with and without bias and activation, 3-d inputs falling back; relu, gelu, tanh
and sigmoid operators under several splits.
A saved output changed in place is refused, as autograd refuses it."""
import pytest
import torch

import parallel_ops.conv2d  # noqa: F401  (attaches model.conv2d)
from parallel_ops import Model, ParallelConfig
from parallel_ops.conv2d import Conv2d
from parallel_ops.elementwise import Elementwise
from parallel_ops.linear import Linear
from taskrt.errors import ExecutionError
from oracle import parallel_steps, random_feeds


def conv_stack(activation, bias=True, groups=1):
    m = Model("explicit", seed=3, dtype="float32")
    x = m.input("x", (4, 6, 9, 8), requires_grad=True)
    h = m.conv2d(x, 6, 3, padding=1, name="c1", activation=activation, bias=bias,
                 groups=groups)
    h = m.conv2d(h, 6, (3, 2), stride=(2, 1), padding=(1, 0), name="c2",
                 activation=activation, bias=bias)
    labels = m.input("labels", h.shape[:3], dtype="int64")
    m.softmax_cross_entropy(h, labels, name="loss")
    return m, random_feeds(m, 5, h.shape[3])


STRATEGIES = {
    "data parallel": {"c1": ParallelConfig.of([0, 1, 2, 3], n=4),
                      "c2": ParallelConfig.of([0, 1, 2, 3], n=4)},
    "halos and channels": {"c1": ParallelConfig.of([2, 0, 1, 3], h=2, c=2),
                           "c2": ParallelConfig.of([1, 3], w=2)},
    "channels straddling groups": {"c1": ParallelConfig.of([0, 1, 2, 3], c=4)},
}


@pytest.fixture(autouse=True)
def deterministic_kernels(monkeypatch):
    """On a GPU (SOAPFLOW_TEST_DEVICE=cuda) cuDNN may pick non-deterministic algorithms;
    two runs must differ only by the path under test."""
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)


# per strategy: backward calls of the explicit path in 2 steps, per conv
EXPLICIT_PARTS = {"data parallel": {"c1": 8, "c2": 8},
                  "halos and channels": {"c2": 4},
                  "channels straddling groups": {"c1": 6, "c2": 8}}


def _run(model, feeds, strategy, explicit: bool, counts=None, cls=Conv2d):
    """Two training steps; with explicit=False the op's own backward is switched off (its
    parts go through autograd); `counts` gets the op's backward() calls per op name."""
    with pytest.MonkeyPatch.context() as mp:
        if not explicit:
            mp.setattr(cls, "explicit_backward", False)
        if counts is not None:
            real = cls.backward

            def counted(self, *args, **kwargs):
                counts[self.name] = counts.get(self.name, 0) + 1
                return real(self, *args, **kwargs)
            mp.setattr(cls, "backward", counted)
        records, _ = parallel_steps(model, feeds, strategy, steps=2)
    return records


def _assert_same_bits(a, b):
    for step, (x, y) in enumerate(zip(a, b)):
        assert x["loss"] == y["loss"], f"step {step}: loss"
        for group in ("values", "grads", "weights"):
            assert x[group].keys() == y[group].keys()
            for name in x[group]:
                assert torch.equal(x[group][name], y[group][name]), \
                    f"step {step}: {group} of {name} differ"


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "tanh", "sigmoid"])
@pytest.mark.parametrize("strategy", STRATEGIES, ids=str)
def test_same_bits_as_autograd(activation, strategy):
    groups = 2 if strategy == "channels straddling groups" else 1
    m, feeds = conv_stack(activation, bias=activation != "tanh", groups=groups)
    counts: dict = {}
    explicit = _run(m, feeds, STRATEGIES[strategy], True, counts)
    m2, _ = conv_stack(activation, bias=activation != "tanh", groups=groups)
    autograd = _run(m2, feeds, STRATEGIES[strategy], False)
    _assert_same_bits(explicit, autograd)
    # Parts that are one plain convolution took the explicit path (2 steps x parts), the
    # others autograd's.
    assert counts == EXPLICIT_PARTS[strategy]


def activation_stack(kind, **kwargs):
    m = Model("explicit_act", seed=3, dtype="float32")
    x = m.input("x", (4, 3, 5, 6), requires_grad=True)
    h = getattr(m, kind)(x, name="act", **kwargs)
    h = m.conv2d(h, 3, 1, name="mix")
    labels = m.input("labels", h.shape[:3], dtype="int64")
    m.softmax_cross_entropy(h, labels, name="loss")
    return m, random_feeds(m, 5, h.shape[3])


@pytest.mark.parametrize("kind,kwargs", [("relu", {}), ("gelu", {}),
                                         ("gelu", {"approximate": "tanh"}), ("tanh", {}),
                                         ("sigmoid", {})], ids=str)
@pytest.mark.parametrize("config", [ParallelConfig.of([0, 1, 2, 3], n=4),
                                    ParallelConfig.of([3, 1, 0], a1=3),
                                    ParallelConfig.of([0, 2], a2=2)], ids=str)
def test_activation_operators_same_bits_as_autograd(kind, kwargs, config):
    m, feeds = activation_stack(kind, **kwargs)
    counts: dict = {}
    explicit = _run(m, feeds, {"act": config}, True, counts, Elementwise)
    m2, _ = activation_stack(kind, **kwargs)
    autograd = _run(m2, feeds, {"act": config}, False, cls=Elementwise)
    _assert_same_bits(explicit, autograd)
    assert counts == {"act": 2 * len(config.devices)}


@pytest.mark.parametrize("config", [ParallelConfig.of([0, 1, 2, 3], n=4),
                                    ParallelConfig.of([3, 1, 0], a1=3)], ids=str)
def test_dropout_same_bits_as_autograd(config):
    """Dropout's own backward and its forward as x * (keep / (1 - p)) give autograd's bits
    in float32."""
    from parallel_ops.dropout import Dropout
    m, feeds = activation_stack("dropout", p=0.3)
    counts: dict = {}
    explicit = _run(m, feeds, {"act": config}, True, counts, Dropout)
    m2, _ = activation_stack("dropout", p=0.3)
    autograd = _run(m2, feeds, {"act": config}, False, cls=Dropout)
    _assert_same_bits(explicit, autograd)
    assert counts == {"act": 2 * len(config.devices)}


def linear_stack(activation, bias, lead=(6,)):
    m = Model("explicit_fc", seed=3, dtype="float32")
    x = m.input("x", (*lead, 7), requires_grad=True)
    h = m.linear(x, 5, name="fc1", activation=activation, bias=bias)
    h = m.linear(h, 4, name="fc2", bias=bias)
    labels = m.input("labels", lead, dtype="int64")
    m.softmax_cross_entropy(h, labels, name="loss")
    return m, random_feeds(m, 5, 4)


# (activation, bias, lead axes, strategy, explicit backward calls in 2 steps per op)
LINEAR_CASES = [
    ("relu", True, (6,), {"fc1": ParallelConfig.of([0, 1, 2, 3], n=4),
                          "fc2": ParallelConfig.of([0, 1, 2, 3], n=4)},
     {"fc1": 8, "fc2": 8}),
    ("gelu", False, (6,), {"fc1": ParallelConfig.of([2, 0], o=2),
                           "fc2": ParallelConfig.of([0, 1, 2], i=3)}, {"fc1": 4, "fc2": 6}),
    (None, True, (6,), {"fc1": ParallelConfig.of([1, 3, 0, 2], n=2, i=2),
                        "fc2": ParallelConfig.of([3, 2], o=2)}, {"fc1": 8, "fc2": 4}),
    # 3-d and 4-d inputs: the flattened 2-d product where a part's view is contiguous (a
    # device buffer holding more than the part's block makes it strided: autograd's path)
    ("tanh", True, (3, 2), {"fc1": ParallelConfig.of([0, 1], n=2)}, {"fc1": 4, "fc2": 6}),
    ("relu", False, (4, 3, 2), {"fc1": ParallelConfig.of([0, 1, 2, 3], n=2, o=2),
                                "fc2": ParallelConfig.of([0, 1, 2], s1=3)}, {"fc1": 8}),
    ("gelu", True, (4, 4), {"fc1": ParallelConfig.of([2, 1], s1=2),
                            "fc2": ParallelConfig.of([0, 1, 3, 2], n=2, i=2)},
     {"fc1": 4, "fc2": 4}),
]


@pytest.mark.parametrize("case", LINEAR_CASES, ids=lambda c: f"{c[0]}-bias{c[1]}-{c[2]}")
def test_linear_same_bits_as_autograd(case):
    activation, bias, lead, strategy, calls = case
    m, feeds = linear_stack(activation, bias, lead)
    counts: dict = {}
    explicit = _run(m, feeds, strategy, True, counts, Linear)
    m2, _ = linear_stack(activation, bias, lead)
    autograd = _run(m2, feeds, strategy, False, cls=Linear)
    _assert_same_bits(explicit, autograd)
    assert counts == calls


def test_saved_output_changed_in_place_is_refused():
    m = Model("inplace", seed=1)
    x = m.input("x", (2, 3, 5, 5))
    m.conv2d(x, 4, 3, name="c", activation="relu")
    op = m.op("c")
    spec = op.part((1, 1, 1, 1, 1), (0, 0, 0, 0, 0))
    w, b = (torch.randn(4, 3, 3, 3, dtype=torch.float64),
            torch.randn(4, dtype=torch.float64))
    (y,), saved = op.forward_saving(spec, [torch.randn(2, 3, 5, 5, dtype=torch.float64)],
                                    [w, b])
    y.add_(1)
    with pytest.raises(RuntimeError, match=r"conv2d 'c': the output of its relu was "
                                           r"changed in place after forward"):
        op.backward(spec, saved, [torch.ones_like(y)], (True,), (True, True))


def test_unsupported_part_falls_back_to_autograd():
    m = Model("fallback", seed=1)
    x = m.input("x", (2, 4, 6, 6))
    m.conv2d(x, 6, 3, padding=1, groups=2, name="c")
    op = m.op("c")
    straddling = op.part((1, 3, 1, 1, 1), (0, 1, 0, 0, 0))     # channels 2-3: two groups
    assert straddling.info.span == 2
    assert op.forward_saving(straddling, [torch.randn(2, 4, 6, 6)],
                             [torch.randn(2, 2, 3, 3), torch.randn(2)]) is None


class _Launch:
    def __init__(self, name, args, state_from=None):
        self.name, self.args, self.state_from = name, args, state_from


def conv_part_after_forward(name: str):
    """One explicit-backward conv part (fused ReLU, float64) whose forward has run:
    (forward context, backward context reading no output gradient, (x, w, b))."""
    from parallel_ops.tasks import DIN, DW, IN, W, StageArgs, forward_task
    from taskrt.executor.steps import TaskContext
    m = Model(name, seed=1, dtype="float64")
    x = m.input("x", (2, 3, 5, 5), requires_grad=True)
    m.conv2d(x, 4, 3, name="c", activation="relu")
    op, color = m.op("c"), (0, 0, 0, 0, 0)
    spec = op.part((1, 1, 1, 1, 1), color)
    xv, wv, bv = torch.randn(2, 3, 5, 5, dtype=torch.float64), \
        torch.randn(4, 3, 3, 3, dtype=torch.float64), torch.randn(4, dtype=torch.float64)
    fwd = StageArgs(op, {color: spec}, {color: ((IN, 0), (W, 0), (W, 1))}, True, (True,),
                    (True, True))
    ctx = TaskContext(_Launch("c/fwd", fwd), color, 0, "cpu")
    forward_task(ctx, xv, wv, bv)
    bwd = StageArgs(op, {color: spec}, {color: ((IN, 0), (W, 0), (W, 1), (DIN, 0), (DW, 0),
                                                (DW, 1))}, True, (True,), (True, True))
    bctx = TaskContext(_Launch("c/bwd", bwd, "c/fwd"), color, 0, "cpu", source=ctx)
    return ctx, bctx, (xv, wv, bv)


def test_part_without_output_gradient_gives_zero_gradients():
    """A backward part that reads no output gradient (none flows back to it) returns zero
    gradients of its inputs' and weights' part shapes, as the autograd path does."""
    from parallel_ops.tasks import backward_task
    ctx, bctx, (xv, wv, bv) = conv_part_after_forward("zero")
    assert type(ctx.saved).__name__ == "_Explicit"          # the op's own backward's state
    grads = backward_task(bctx, xv, wv, bv, None, None, None)
    assert [tuple(g.shape) for g in grads] == [(2, 3, 5, 5), (4, 3, 3, 3), (4,)]
    assert all(g.dtype == torch.float64 and not g.any() for g in grads)
    assert ctx.saved is None                       # the saved state was taken


def test_backward_missing_a_needed_gradient_is_a_clear_error():
    """An op's own backward that returns None for a gradient it was asked for: the task
    fails naming itself, its device and what backward() must give."""
    m, feeds = conv_stack("relu")
    real = Conv2d.backward

    def lazy(self, spec, saved, output_grads, need_inputs, need_weights):
        din, dw = real(self, spec, saved, output_grads, need_inputs, need_weights)
        return din, [dw[0], None]                    # the bias gradient left out
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Conv2d, "backward", lazy)
        with pytest.raises(ExecutionError, match=r"c2/bwd.* failed on device \d+: TypeError: "
                           r"task returned None for a Red\+ requirement.*need_inputs / "
                           r"need_weights"):
            parallel_steps(m, feeds, STRATEGIES["data parallel"], steps=1)


def pool_stack(output_size):
    import parallel_ops.pool2d  # noqa: F401  (attaches model.adaptive_avg_pool2d)
    m = Model("explicit_pool", seed=3, dtype="float32")
    x = m.input("x", (4, 3, 7, 6), requires_grad=True)
    h = m.conv2d(x, 5, 3, padding=1, name="c", activation="relu")
    h = m.flat(m.adaptive_avg_pool2d(h, output_size, name="pool"))
    h = m.linear(h, 4, name="fc")
    m.softmax_cross_entropy(h, m.input("labels", (4,), dtype="int64"), name="loss")
    return m, random_feeds(m, 5, 4)


# (output size, pool's config, explicit backward calls in 2 steps)
POOL_CASES = [(1, ParallelConfig.of([0]), 2), (1, ParallelConfig.of([0, 1, 2], c=3), 6),
              ((3, 2), ParallelConfig.of([0, 1], n=2), 4),
              ((3, 2), ParallelConfig.of([1, 0], h=2), 0)]     # windows split: autograd


@pytest.mark.parametrize("case", POOL_CASES, ids=lambda c: f"{c[0]}-{c[1]}")
def test_adaptive_pool_same_bits_as_autograd(case):
    """Adaptive average pooling's own backward on parts with every output row and column:
    for output size 1 torch's mean (its derivative: expand, divide by h * w), else its
    kernel's backward."""
    from parallel_ops.pool2d import AdaptiveAvgPool2d
    output_size, config, calls = case
    m, feeds = pool_stack(output_size)
    counts: dict = {}
    explicit = _run(m, feeds, {"pool": config}, True, counts, AdaptiveAvgPool2d)
    m2, _ = pool_stack(output_size)
    autograd = _run(m2, feeds, {"pool": config}, False, cls=AdaptiveAvgPool2d)
    _assert_same_bits(explicit, autograd)
    assert counts.get("pool", 0) == calls
