"""Real data for the image apps (--data digits): scikit-learn's 1797 8x8 handwritten
digits, scaled up to the model's input size, with train and held-out accuracy.
"""
from __future__ import annotations

import torch

from parallel_ops import Model
from taskrt import Machine

from .app import Network
from .errors import UsageError


def digits_tensors() -> tuple[torch.Tensor, torch.Tensor]:
    """The digits images (float64) and labels; a UsageError when scikit-learn is missing."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise UsageError("--data digits needs scikit-learn, which ships the digits images: "
                         ".venv/bin/pip install scikit-learn (it is in the 'test' extra).") \
            from None
    d = load_digits()
    return torch.tensor(d.images, dtype=torch.float64), torch.tensor(d.target)


class DigitsFeeder:
    """1797 8x8 digits: 1500 for training in seeded shuffled epochs, 297 held out. Images
    are standardized, resized to the model's input size and repeated over its channels."""

    def __init__(self, net: Network, a):
        images, labels = digits_tensors()
        g = torch.Generator().manual_seed(a.seed)
        perm = torch.randperm(len(labels), generator=g)
        images, labels = images[perm], labels[perm]
        mean, std = images[:1500].mean(), images[:1500].std()
        self.images = ((images - mean) / std).unsqueeze(1)
        self.labels = labels
        self.net, self.a, self.seed = net, a, a.seed
        self.shape = net.model.tensors[net.image].shape
        self.dtype = getattr(torch, net.model.tensors[net.image].dtype)

    def _pixels(self, idx) -> torch.Tensor:
        x = self.images[idx]
        n, c, h, w = self.shape
        x = torch.nn.functional.interpolate(x, size=(h, w), mode="bilinear",
                                            align_corners=False)
        return x.expand(-1, c, -1, -1).to(self.dtype).contiguous()

    def train_batch(self, it: int) -> dict:
        b = self.shape[0]
        epoch_len = 1500 // b
        epoch, k = divmod(it, epoch_len)
        g = torch.Generator().manual_seed(self.seed * 7919 + epoch)
        idx = torch.randperm(1500, generator=g)[k * b:(k + 1) * b]
        return {self.net.image: self._pixels(idx), self.net.labels: self.labels[idx]}

    def accuracy(self, logits: torch.Tensor, feeds: dict) -> float:
        return (logits.argmax(-1) == feeds[self.net.labels]).double().mean().item()

    def test_accuracy(self, model: Model, trainer, machine: Machine, mpi: bool) -> float:
        """Accuracy on the held-out digits with the trained weights in evaluation mode
        (running batch-norm statistics, no dropout), under the same strategy."""
        ev = model.compile(machine, dict(trainer.configs), None, training=False,
                           executor="mpi" if mpi else "local")
        for w in model.weights:
            if w.name in ev.graph.initial_valid:
                ev.set_weight(w.name, trainer.weight(w.name))
        b = self.shape[0]
        test = torch.arange(1500, len(self.labels))
        right = 0
        for lo in range(0, len(test), b):
            idx = test[lo:lo + b]
            real = len(idx)
            idx = torch.cat([idx, test[:b - real]]) if real < b else idx
            feeds = {self.net.image: self._pixels(idx), self.net.labels: self.labels[idx]}
            ev.step(feeds)
            pred = ev.read(self.net.logits).argmax(-1)
            right += int((pred[:real] == self.labels[idx][:real]).sum())
        return right / len(test)
