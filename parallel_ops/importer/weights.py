"""How a module's parameters and buffers become operator weights, and back.

Operators may store a weight in another layout than torch (LSTM keeps (4, H, I) for torch's
(4H, I), attention keeps head-major (3, heads, head_dim, E) for (3E, E), a HF Conv1D weight
is the transpose of a Linear's). A `Layout` converts one way and the other; a `Link` ties a
model weight to the state-dict key it came from. Write-back builds a full state dict from
the trained weights, so `module.load_state_dict(...)` round-trips exactly.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch


@dataclass(frozen=True)
class Layout:
    """same: equal shapes; reshape: same elements, other shape; transpose: a 2-d transpose."""
    kind: str
    torch_shape: tuple[int, ...]

    def to_op(self, value: torch.Tensor, op_shape) -> torch.Tensor:
        op_shape = tuple(op_shape)
        if self.kind == "transpose":
            value = value.t()
        out = value.reshape(op_shape) if self.kind == "reshape" else value
        if tuple(out.shape) != op_shape:
            raise ValueError(f"weight of shape {tuple(value.shape)} does not fit the "
                             f"operator's {op_shape} ({self.kind})")
        return out.detach().clone().contiguous()

    def to_torch(self, value: torch.Tensor) -> torch.Tensor:
        if self.kind == "transpose":
            value = value.t()
        return value.reshape(self.torch_shape).contiguous()


def same(t: torch.Tensor) -> Layout:
    return Layout("same", tuple(t.shape))


def reshaped(t: torch.Tensor) -> Layout:
    return Layout("reshape", tuple(t.shape))


def transposed(t: torch.Tensor) -> Layout:
    return Layout("transpose", tuple(t.shape))


@dataclass(frozen=True)
class Link:
    """Model weight <-> module state-dict entry."""
    weight: str          # model weight name, e.g. "lstm_l0.weight_ih"
    key: str             # state-dict key, e.g. "lstm.weight_ih_l0"
    layout: Layout


def build_state_dict(module: torch.nn.Module, links: Mapping[str, Link],
                     weights: Mapping[str, torch.Tensor], counters: Mapping[str, int],
                     steps: int) -> dict[str, torch.Tensor]:
    """The module's state dict with every linked entry replaced by its trained value.

    `counters` are buffers that count training steps (BatchNorm's num_batches_tracked):
    they advance by `steps`. Entries that alias a linked one (tied weights) follow it."""
    sd = module.state_dict(keep_vars=False)
    out = {k: v.detach().clone() for k, v in sd.items()}
    by_storage: dict[tuple, list[str]] = {}
    for k, v in sd.items():
        if v.numel():
            by_storage.setdefault((v.untyped_storage().data_ptr(), v.storage_offset(),
                                   tuple(v.shape), tuple(v.stride())), []).append(k)
    for link in links.values():
        if link.weight not in weights:
            raise KeyError(f"write-back: no trained value for weight '{link.weight}' (state "
                           f"key '{link.key}').")
        if link.key not in sd:
            continue
        ref = sd[link.key]
        value = link.layout.to_torch(weights[link.weight].detach().cpu()).to(ref.dtype)
        keys = [link.key]
        if ref.numel():
            keys = by_storage.get((ref.untyped_storage().data_ptr(), ref.storage_offset(),
                                   tuple(ref.shape), tuple(ref.stride())), keys)
        for k in keys:
            out[k] = value.clone()
    for key, start in counters.items():
        if key in out:
            out[key] = torch.full_like(out[key], int(start) + int(steps))
    return out
