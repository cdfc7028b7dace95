"""Imported: what import_module returns (the model, its inputs and outputs, weight links)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..model import Model
from ..tensor import Tensor
from .weights import Link, build_state_dict


@dataclass
class Imported:
    """The result of import_module: the model, its inputs/outputs and the weight links."""
    model: Model
    module: torch.nn.Module
    inputs: list[Tensor]
    outputs: list
    links: dict[str, Link]
    counters: dict[str, int] = field(default_factory=dict)
    method: str = "fx"
    op_paths: dict[str, str] = field(default_factory=dict)   # op name -> module path

    def output(self, index: int = 0) -> Tensor:
        outs = [o for o in self.outputs if isinstance(o, Tensor)]
        return outs[index]

    def add_cross_entropy(self, output: int = 0, labels: str = "labels",
                          name: str = "loss") -> Tensor:
        """Add an int64 labels input and softmax cross-entropy on output `output` (logits
        (N, ..., C) against labels (N, ...)); like F.cross_entropy on the flattened batch."""
        logits = self.output(output)
        y = self.model.input(labels, logits.shape[:-1], dtype="int64")
        return self.model.softmax_cross_entropy(logits, y, name=name)

    def feeds(self, *args, **kwargs) -> dict[str, torch.Tensor]:
        """The feed dict of trainer.step from forward-style arguments (the tensors among
        them, in order) plus extra inputs, such as labels, by name."""
        out = {}
        for t, v in zip(self.inputs, [a for a in args if isinstance(a, torch.Tensor)]):
            out[t.name] = v
        for k, v in kwargs.items():
            out[k] = v
        return out

    def state_dict(self, weights, steps: int | None = None) -> dict[str, torch.Tensor]:
        """The module's state dict holding `weights` ({model weight: value}, e.g.
        trainer.weights()); step counters advance by `steps` (default: the model's)."""
        steps = self.model.step_count if steps is None else steps
        return build_state_dict(self.module, self.links, weights, self.counters, steps)

    def write_back(self, trainer, module: torch.nn.Module | None = None) -> torch.nn.Module:
        """Load the trainer's current weights into `module` (default: the imported one),
        so training can continue in plain PyTorch. Under MPI every rank must call it."""
        module = module if module is not None else self.module
        # Step counters advance by the steps this trainer trained (an evaluating one
        # counts no batches, as a module in eval() does not).
        sd = self.state_dict(trainer.weights(), trainer.step_count if trainer.training else 0)
        module.load_state_dict(sd, strict=True)
        return module
