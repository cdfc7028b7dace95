"""import_module folds an activation into the Conv2d / Linear / BatchNorm2d it follows
(parallel_ops.activation.fuse_activations) only where nothing else reads the operator's
output; fused or not, training equals PyTorch; a fused operator refuses a reduction split
with a message that says how to keep the activation separate."""
import copy
import os
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import assert_state_close, imported_steps, torch_steps  # noqa: E402
from parallel_ops import SGD, ConfigError, ParallelConfig  # noqa: E402
from parallel_ops.importer import import_module  # noqa: E402
from taskrt import Machine  # noqa: E402


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)
        self.fc1 = nn.Linear(4 * 4 * 4, 6)
        self.fc2 = nn.Linear(6, 6)
        self.head = nn.Linear(6, 5)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))          # bn + relu: fused
        y = self.conv2(x)
        x = F.relu(y) + y                               # y read twice: not fused
        h = torch.tanh(self.fc1(x.flatten(1)))          # fused
        h = F.gelu(self.fc2(h), approximate="tanh")     # approximate GELU: not fused
        return self.head(torch.sigmoid(h))              # sigmoid after gelu: not fused


def _net():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    return Net().double(), (torch.randn(6, 3, 4, 4, generator=g, dtype=torch.float64),), \
        torch.randint(0, 5, (6,), generator=g)


def test_fused_where_only_the_activation_reads():
    module, inputs, _ = _net()
    imp = import_module(module, inputs, fuse_elementwise=False)  # activations only
    fused = {o.name: o.activation for o in imp.model.ops if getattr(o, "activation", None)}
    assert fused == {"bn": "relu", "fc1": "tanh"}
    kinds = sorted(o.type for o in imp.model.ops if o.type in ("relu", "tanh", "gelu",
                                                                "sigmoid"))
    assert kinds == ["gelu", "relu", "sigmoid"]
    assert set(imp.op_paths) == {o.name for o in imp.model.ops}
    plain = import_module(module, inputs, fuse_activations=False, fuse_elementwise=False)
    assert len(plain.model.ops) == len(imp.model.ops) + 2
    assert not any(getattr(o, "activation", None) for o in plain.model.ops)


class _TwoOutputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        y = self.fc(x)
        return y, torch.relu(y)             # the pre-activation is an output: kept


def test_a_module_output_is_not_fused_away():
    imp = import_module(_TwoOutputs(), (torch.randn(2, 4),))
    assert [o.type for o in imp.model.ops] == ["linear", "relu"]


@pytest.mark.parametrize("fuse", [True, False])
def test_training_equals_pytorch(fuse):
    module, inputs, labels = _net()
    strategy = {"conv": ParallelConfig.of([0, 1], h=2), "bn": ParallelConfig.of([1, 2], c=2),
                "fc1": ParallelConfig.of([0, 2], o=2)}
    opt = SGD(lr=0.1, momentum=0.9)
    want_losses, want_state = torch_steps(module, inputs, labels, copy.deepcopy(opt), 2)
    losses, state, _, _ = imported_steps(module, inputs, labels, strategy, Machine.local(3),
                                         copy.deepcopy(opt), 2, fuse_activations=fuse)
    assert losses == pytest.approx(want_losses, rel=1e-10)
    assert_state_close(state, want_state, where=f"fuse={fuse}")


def test_reduction_split_needs_the_activation_separate():
    module, inputs, labels = _net()
    split = {"fc1": ParallelConfig.of([0, 1], i=2)}
    imp = import_module(module, inputs)
    imp.add_cross_entropy()
    with pytest.raises(ConfigError, match=r"linear 'fc1'.*degree 2 on 'i': it must stay whole "
                                          r"\(the fused activation 'tanh'.*fuse_activations="
                                          r"False"):
        imp.model.compile(Machine.local(2), split, SGD(lr=0.1))
    opt = SGD(lr=0.1)
    want_losses, want_state = torch_steps(module, inputs, labels, copy.deepcopy(opt), 2)
    losses, state, _, _ = imported_steps(module, inputs, labels, split, Machine.local(2),
                                         copy.deepcopy(opt), 2, fuse_activations=False)
    assert losses == pytest.approx(want_losses, rel=1e-10)
    assert_state_close(state, want_state, where="reduction split, activation separate")
