"""Model-level tensors and weights: the values that flow between operators.

A Tensor becomes a Region when the model is lowered; its gradient gets a region named
`<name>@grad`. A Weight is a Tensor with an initial value and optimizer state.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    producer: Any = None            # the Op that writes it (None for inputs and weights)
    requires_grad: bool = False
    is_weight: bool = False

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def grad_name(self) -> str:
        return f"{self.name}@grad"

    def __str__(self) -> str:
        return f"{self.name}{list(self.shape)}"

    __repr__ = __str__


@dataclass(eq=False)
class Weight(Tensor):
    owner: Any = None               # the Op whose config partitions it (the first user)
    users: list = field(default_factory=list)
