"""Subclasses of known layers that redefine forward (as timm's BatchNormAct2d and
LayerNorm2d do) are traced through, not converted as their base class; in-place buffer
updates that torch.fx runs instead of recording leave the module as it was and count."""
import copy
import os
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from examples.vision_blocks import LayerNorm2d  # noqa: E402  (timm's)
from harness import assert_state_close, imported_steps, torch_steps  # noqa: E402
from parallel_ops import SGD  # noqa: E402
from taskrt import Machine  # noqa: E402


class BatchNormAct(nn.BatchNorm2d):
    """timm's BatchNormAct2d, shortened: batch norm, then ReLU6, counting batches itself."""

    def __init__(self, c):
        super().__init__(c)
        self.act = nn.ReLU6()

    def forward(self, x):
        if self.training:
            self.num_batches_tracked.add_(1)
        x = F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                         self.training, self.momentum, self.eps)
        return self.act(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = BatchNormAct(4)
        self.norm = LayerNorm2d(4)          # 4 channels, width 4: the wrong axis would fit
        self.fc = nn.Linear(64, 5)

    def forward(self, x):
        return self.fc(torch.flatten(self.norm(self.bn(self.conv(x) * 4)), 1))


def _net():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    return (Net().double(), torch.randn(4, 3, 4, 4, generator=g, dtype=torch.float64),
            torch.randint(0, 5, (4,), generator=g))


@pytest.mark.parametrize("method", ["fx", "export"])
def test_subclasses_that_redefine_forward_train_as_pytorch(method):
    net, x, y = _net()
    want, want_state = torch_steps(net, (x,), y, SGD(lr=0.1, momentum=0.9), 2)
    losses, state, imp, trainer = imported_steps(net, (x,), y, {}, Machine.local(2),
                                                 SGD(lr=0.1, momentum=0.9), 2, method)
    assert "relu6" in [op.type for op in imp.model.ops] or any(
        op.display_type.endswith("+relu6") for op in imp.model.ops)
    assert losses == pytest.approx(want, rel=1e-10)
    assert_state_close(state, want_state)
    assert int(net.bn.num_batches_tracked) == 0           # importing changed nothing
    back = imp.write_back(trainer, copy.deepcopy(net))
    assert int(back.bn.num_batches_tracked) == 2
