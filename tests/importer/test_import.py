"""Importing torch.nn.Modules: trained under strategies in one process they equal the same
steps in plain PyTorch; weights go back into the module; unsupported code is reported."""
import copy
import os
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import assert_state_close, imported_steps, torch_steps  # noqa: E402
from nets import NETS, gpt2, gpt2_strategies  # noqa: E402
from parallel_ops import SGD, Adam, ParallelConfig  # noqa: E402
from parallel_ops.importer import (UnsupportedModelError, import_module,  # noqa: E402
                                   register_module)
from taskrt import Machine  # noqa: E402

DEVICES = 3
pytestmark = pytest.mark.filterwarnings("ignore:The tensor attributes self.lstm")
CASES = [(net, s, "fx") for net in NETS for s in ("data_parallel", "mixed")] + \
        [(net, "mixed", "export") for net in NETS]


@pytest.mark.parametrize("net,strategy,method", CASES, ids=["-".join(c) for c in CASES])
def test_imported_training_equals_pytorch(net, strategy, method):
    build, strategies = NETS[net]
    module, inputs, labels = build()
    opt = SGD(lr=0.1, momentum=0.9)
    want_losses, want_state = torch_steps(module, inputs, labels, copy.deepcopy(opt), 2)
    losses, state, imp, trainer = imported_steps(module, inputs, labels,
                                                 strategies(DEVICES)[strategy],
                                                 Machine.local(DEVICES), copy.deepcopy(opt), 2,
                                                 method)
    assert imp.method == method
    assert losses == pytest.approx(want_losses, rel=1e-10)
    assert_state_close(state, want_state, where=f"{net}/{strategy}/{method}")
    # Written back, the module holds the trained weights (and BN's counters).
    target = copy.deepcopy(module)
    imp.write_back(trainer, target)
    assert_state_close(target.state_dict(), want_state, where="write_back")


@pytest.mark.parametrize("net", list(NETS))
def test_weights_round_trip_exactly(net):
    module, inputs, _ = NETS[net][0]()
    imp = import_module(module, inputs)
    strategy = {k: v for k, v in NETS[net][1](DEVICES)["mixed"].items() if k != "loss"}
    trainer = imp.model.compile(Machine.local(DEVICES), strategy, None, training=False)
    state = imp.state_dict(trainer.weights(), steps=0)
    for k, v in module.state_dict().items():
        assert torch.equal(state[k], v), k


def test_continue_in_pytorch_after_write_back():
    module, inputs, labels = NETS["resnet"][0]()
    want, want_state = torch_steps(module, inputs, labels, SGD(lr=0.05), 3)
    losses, _, imp, trainer = imported_steps(module, inputs, labels, NETS["resnet"][1](2)["mixed"],
                                             Machine.local(2), SGD(lr=0.05), 2)
    target = imp.write_back(trainer, copy.deepcopy(module))
    last, state = torch_steps(target, inputs, labels, SGD(lr=0.05), 1)
    assert losses + last == pytest.approx(want, rel=1e-10)
    assert_state_close(state, want_state)


class Features(nn.Module):
    """Functions and methods as users write them."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 12)
        self.w1 = nn.Parameter(torch.randn(12, 8, dtype=torch.float64) * 0.3)
        self.w2 = nn.Parameter(torch.randn(12, 8, dtype=torch.float64) * 0.3)
        self.scale = nn.Parameter(torch.ones(8, dtype=torch.float64))
        self.keep = nn.Identity()
        self.flat = nn.Flatten()
        self.drop = nn.Dropout(0.0)
        self.gate = nn.Sigmoid()
        self.out = nn.Linear(16, 5)

    def forward(self, x):                                 # x: (N, S, 6)
        n, s = x.shape[0], x.size(1)
        h = self.proj(x).view(n, s, 2, 6).permute(0, 2, 1, 3)      # (N, 2, S, 6)
        q, k, v = h.chunk(3, dim=-1)                                 # (N, 2, S, 2) each
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        a = a + torch.softmax(q @ k.transpose(-2, -1) * 0.5, dim=-1) @ self.gate(v)
        a = a.transpose(1, 2).reshape(n, s, 4)
        b = torch.tanh(torch.cat([a, -a], dim=-1) @ self.w1.t())     # (N, S, 12)
        c = F.linear(b, self.w2.t()) * self.scale - 0.5 * b[..., :8] ** 2
        c = torch.softmax(c / 2, dim=-1)
        last = c[:, -1]                                              # (N, 8)
        first = c[:, 0, :]
        both = self.keep(torch.cat((last, first), 1).unsqueeze(1))   # (N, 1, 16)
        return self.out(self.drop(self.flat(both)))


def _features():
    torch.manual_seed(11)
    net = Features().double()
    g = torch.Generator().manual_seed(12)
    return net, (torch.randn(3, 4, 6, generator=g, dtype=torch.float64),), \
        torch.randint(0, 5, (3,), generator=g)


@pytest.mark.parametrize("method", ["fx", "export"])
def test_functions_and_methods(method):
    module, inputs, labels = _features()
    want, want_state = torch_steps(module, inputs, labels, Adam(lr=0.01), 2)
    losses, state, imp, _ = imported_steps(module, inputs, labels, {}, Machine.local(2),
                                           Adam(lr=0.01), 2, method)
    assert losses == pytest.approx(want, rel=1e-10)
    assert_state_close(state, want_state)
    types = {o.type for o in imp.model.ops} | {   # with those fused into one (fused.py)
        m.type for o in imp.model.ops for m in getattr(o, "members", ())}
    assert {"sdpa", "bmm", "parameter", "scalar_mul", "scalar_pow", "split", "transpose",
            "concat", "sigmoid", "flat"} <= types


class SequenceFirst(nn.Module):
    """batch_first=False layers, padding='same', and a loss computed inside the module."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 6)
        self.mha = nn.MultiheadAttention(6, 2)
        self.conv = nn.Conv2d(1, 2, 3, padding="same")
        self.fc = nn.Linear(6 + 2 * 5 * 6, 3)
        self.ce = nn.CrossEntropyLoss()

    def forward(self, x, labels):                         # x: (T, N, 4)
        y, _ = self.lstm(x)
        a, _ = self.mha(y, y, y, need_weights=False)
        img = self.conv(a.permute(1, 0, 2).unsqueeze(1)).flatten(1)
        return self.ce(self.fc(torch.cat([a[-1], img], 1)), labels)


@pytest.mark.parametrize("method", ["fx", "export"])
def test_sequence_first_layers_and_a_loss_inside_the_module(method):
    torch.manual_seed(18)
    module = SequenceFirst().double()
    g = torch.Generator().manual_seed(19)
    x, y = torch.randn(5, 3, 4, generator=g, dtype=torch.float64), torch.tensor([0, 2, 1])
    ref = copy.deepcopy(module)
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    want = []
    for _ in range(2):
        opt.zero_grad()
        loss = ref(x, y)
        loss.backward()
        opt.step()
        want.append(loss.item())
    imp = import_module(module, (x, y), method=method)
    assert [o.name for o in imp.model.ops][:6] == ["lstm.in", "lstm", "lstm.out", "mha.in",
                                                   "mha", "mha.out"]
    trainer = imp.model.compile(Machine.local(2), {"lstm": ParallelConfig.of([0, 1], h=2),
                                                   "mha": ParallelConfig.of([1, 0], h=2)},
                                SGD(lr=0.1))
    assert [trainer.step(imp.feeds(x, y)) for _ in range(2)] == pytest.approx(want, rel=1e-10)
    assert_state_close(imp.state_dict(trainer.weights()), ref.state_dict())


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(9, 6)
        self.head = nn.Linear(6, 9, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, idx):
        return self.head(torch.relu(self.emb(idx)))


def test_tied_weights_stay_tied():
    torch.manual_seed(13)
    module = Tied().double()
    idx = torch.randint(0, 9, (4, 3), generator=torch.Generator().manual_seed(14))
    want, want_state = torch_steps(module, (idx,), idx, SGD(lr=0.2, momentum=0.5), 2)
    strategy = {"emb": ParallelConfig.of([0, 1], v=2), "head": ParallelConfig.of([1, 0], i=2)}
    losses, state, imp, _ = imported_steps(module, (idx,), idx, strategy, Machine.local(2),
                                           SGD(lr=0.2, momentum=0.5), 2)
    assert [w.name for w in imp.model.weights] == ["emb.weight"]
    assert losses == pytest.approx(want, rel=1e-10)
    assert_state_close(state, want_state)


class Looping(nn.Module):
    """Python control flow over a shape: torch.fx cannot trace it, torch.export can."""

    def __init__(self):
        super().__init__()
        self.cells = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
        self.out = nn.Linear(4, 3)

    def forward(self, x):                                 # x: (N, T, 4)
        h = x[:, 0]
        for t in range(1, x.shape[1]):
            h = torch.tanh(self.cells[t - 1](h) + x[:, t])
        return self.out(h)


def test_export_when_fx_cannot_trace():
    torch.manual_seed(15)
    module = Looping().double()
    g = torch.Generator().manual_seed(16)
    x = torch.randn(4, 3, 4, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (4,), generator=g)
    with pytest.raises(UnsupportedModelError, match="torch.fx cannot trace it"):
        import_module(module, (x,), method="fx")
    want, want_state = torch_steps(module, (x,), y, SGD(lr=0.1), 2)
    losses, state, imp, _ = imported_steps(module, (x,), y, {}, Machine.local(2), SGD(lr=0.1), 2)
    assert imp.method == "export"
    assert losses == pytest.approx(want, rel=1e-10)
    assert_state_close(state, want_state)


class Unsupported3(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.lrn = nn.LocalResponseNorm(2)

    def forward(self, x):
        y = torch.cumsum(self.fc(x), dim=1)               # UNSUPPORTED-1
        z = self.lrn(x.unsqueeze(-1)).squeeze(-1)         # UNSUPPORTED-2
        w = self.fc(x) / (x + 1)                          # UNSUPPORTED-3
        return self.fc(w) + y.sort(dim=1).values * z      # depends on the above only


def _line(tag):
    with open(__file__) as f:
        return next(k for k, line in enumerate(f, 1) if tag in line and "def " not in line)


@pytest.mark.parametrize("method", ["fx", "export"])
def test_every_unsupported_node_is_listed_once(method):
    x = torch.randn(2, 4)
    with pytest.raises(UnsupportedModelError) as info:
        import_module(Unsupported3(), (x,), method=method)
    msg = str(info.value)
    here = os.path.basename(__file__)
    assert f"{here}:{_line('UNSUPPORTED-1')} in forward: no converter; a scan along an axis" \
        in msg
    assert f"{here}:{_line('UNSUPPORTED-3')} in forward: division of two tensors" in msg
    # sort reads only unsupported results: it is listed too (with a stand-in input), once.
    assert msg.count("node 'sort'") == 1 and "data-dependent order" in msg
    assert "node 'mul" not in msg and "getattr" not in msg   # supported ones are not
    assert "docs/custom_ops.md" in msg and "register_module" in msg
    if method == "fx":
        assert "4 operations have no parallel operator" in msg
        assert "node 'cumsum': call_function torch.cumsum at" in msg
        assert "node 'lrn': call_module torch.nn.modules.normalization.LocalResponseNorm " \
               f"in module 'lrn' at {os.path.dirname(__file__)}/{here}:" \
               f"{_line('UNSUPPORTED-2')} in forward: no converter; write one " \
               "(@register_module(LocalResponseNorm), docs/importer.md)" in msg
        assert "node 'truediv': call_function operator.truediv" in msg, msg
    else:                    # export decomposes LocalResponseNorm: its gaps are listed
        assert "node 'pad': call_function torch.ops.aten.pad in module 'lrn'" in msg
        assert "(@register_aten('pad'), docs/importer.md)" in msg


class Gaps(nn.Module):
    """Three gaps in a row: each reads the one before."""

    def forward(self, x):
        y = torch.cumsum(x, dim=1)
        z = torch.rand_like(y) * y
        return torch.einsum("ij,kj->ik", z, x).argmax(dim=1)


@pytest.mark.parametrize("method", ["fx", "export"])
def test_gaps_after_gaps_are_listed_with_their_hints(method):
    with pytest.raises(UnsupportedModelError) as info:
        import_module(Gaps(), (torch.randn(3, 4),), method=method)
    msg = str(info.value)
    assert "4 operations have no parallel operator" in msg, msg
    for hint in ("a scan along an axis", "random numbers drawn in forward",
                 "rewrite it with matmul", "a data-dependent order"):
        assert msg.count(hint) == 1, (hint, msg)


class Swish(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)


class UsesSwish(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 4)
        self.act = Swish()

    def forward(self, x):
        return self.act(self.fc(x))


def test_a_registered_converter_maps_a_user_module():
    @register_module(Swish)
    def swish(ctx, m, x):
        return ctx.model.multiply(x, ctx.model.sigmoid(x, name=ctx.op_name(f"{ctx.path}.sig")),
                                  name=ctx.op_name())
    try:
        torch.manual_seed(17)
        module = UsesSwish().double()
        x = torch.randn(4, 5, dtype=torch.float64)
        y = torch.tensor([0, 3, 1, 2])
        imp = import_module(module, (x,), fuse_elementwise=False)
        assert [o.name for o in imp.model.ops] == ["fc", "act.sig", "act"]
        fused = import_module(module, (x,))       # one operator, named as the last member
        assert [o.name for o in fused.model.ops] == ["fc", "act"]
        want, _ = torch_steps(module, (x,), y, SGD(lr=0.1), 2)
        losses, *_ = imported_steps(module, (x,), y, {}, Machine.local(1), SGD(lr=0.1), 2)
        assert losses == pytest.approx(want, rel=1e-12)
    finally:
        from parallel_ops.importer.registry import MODULES
        MODULES.pop(Swish, None)


def test_gpt2_from_transformers():
    built = gpt2()
    if built is None:
        pytest.skip("transformers is not installed")
    module, inputs, labels = built
    opt = SGD(lr=0.1, momentum=0.9)
    want, want_state = torch_steps(module, inputs, labels, copy.deepcopy(opt), 2)
    losses, state, imp, _ = imported_steps(module, inputs, labels, gpt2_strategies(2)["mixed"],
                                           Machine.local(2), copy.deepcopy(opt), 2)
    assert imp.method == "export"              # HF's forward has Python control flow
    assert losses == pytest.approx(want, rel=1e-10)
    assert_state_close(state, want_state)      # includes the tied wte / lm_head
