"""What an import and its trainers keep apart: each compile of a Model is a training run of
its own (its step count starts at 0: dropout masks, the optimizer's step, batch norm's
num_batches_tracked), and a module imported in eval() still trains with its dropout."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from parallel_ops import SGD, Adam
from parallel_ops.importer import import_module
from taskrt import Machine


class DropNet(nn.Module):
    """Batch norm, an nn.Dropout and an F.dropout that follows the module's flag."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        x = self.drop(F.relu(self.bn(self.conv(x))))
        x = F.dropout(torch.flatten(x, 1), 0.3, self.training)
        return self.fc(x)


def _net():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    return (DropNet().double(), torch.randn(4, 3, 4, 4, generator=g, dtype=torch.float64),
            torch.randint(0, 5, (4,), generator=g))


def _train(imp, x, y, optimizer, steps):
    trainer = imp.model.compile(Machine.local(2), {}, optimizer)
    feeds = imp.feeds(x, labels=y)
    return trainer, [trainer.step(feeds) for _ in range(steps)]


@pytest.mark.parametrize("make_opt", [lambda: SGD(lr=0.1, momentum=0.9), lambda: Adam(lr=0.01)],
                         ids=["sgd", "adam"])
def test_a_second_compile_is_a_run_of_its_own(make_opt):
    net, x, y = _net()
    imp = import_module(net, (x,))
    imp.add_cross_entropy()
    opt = make_opt()
    first, first_losses = _train(imp, x, y, opt, 3)
    second, second_losses = _train(imp, x, y, opt, 2)      # the same optimizer object too
    # Same start, same masks, same optimizer steps: the same first two steps.
    assert second_losses == first_losses[:2]
    assert second.step_count == 2 and first.step_count == 3
    back = imp.write_back(second, copy.deepcopy(net))
    assert int(back.bn.num_batches_tracked) == 2
    back = imp.write_back(first, copy.deepcopy(net))
    assert int(back.bn.num_batches_tracked) == 3
    # The first trainer goes on from its own step 3, not from the last trainer's count.
    _, four = _train(imp, x, y, make_opt(), 4)
    assert first.step(imp.feeds(x, labels=y)) == four[3]


def test_trainers_taking_turns_each_keep_their_step():
    net, x, y = _net()
    imp = import_module(net, (x,))
    imp.add_cross_entropy()
    alone, alone_losses = _train(imp, x, y, SGD(lr=0.1), 4)
    a, _ = _train(imp, x, y, SGD(lr=0.1), 0)
    b, _ = _train(imp, x, y, SGD(lr=0.1), 0)
    feeds = imp.feeds(x, labels=y)
    turns = []
    for _ in range(4):
        turns.append((a.step(feeds), b.step(feeds)))
    assert [t[0] for t in turns] == alone_losses
    assert [t[1] for t in turns] == alone_losses


def test_an_evaluating_trainer_counts_no_batches():
    net, x, y = _net()
    imp = import_module(net, (x,))
    trainer = imp.model.compile(Machine.local(1), {}, None, training=False)
    trainer.step(imp.feeds(x))
    back = imp.write_back(trainer, copy.deepcopy(net))
    assert int(back.bn.num_batches_tracked) == 0


@pytest.mark.parametrize("method", ["fx", "export"])
def test_a_module_in_eval_imports_its_dropout(method):
    net, x, y = _net()
    want = import_module(net, (x,), method=method)
    net.eval()
    got = import_module(net, (x,), method=method)
    assert not net.training and not net.drop.training      # flags as the user left them
    kinds = [op.type for op in got.model.ops]
    assert kinds == [op.type for op in want.model.ops]
    assert kinds.count("dropout") == 2
    losses = []
    for imp in (want, got):
        imp.add_cross_entropy()
        losses.append(_train(imp, x, y, SGD(lr=0.1), 2)[1])
    assert losses[0] == losses[1]
