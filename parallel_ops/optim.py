"""Optimizers as update tasks over weight parts, numerically equal to torch.optim.

Each replica of a weight part applies the same update to the same all-reduced gradient,
so replicas stay identical without a broadcast. `step_count` is advanced by the trainer
before each iteration; every rank advances it alike. `update_many` does `update` for many
parts in multi-tensor calls (the local executor batches a device's updates:
taskrt.launch, IndexLaunch.batch); an optimizer without it runs one task per part.
"""
from __future__ import annotations

import math

import torch


def _check_hyper(owner: str, example: dict, **values: float) -> None:
    """Every hyperparameter a finite number >= 0 (nan or inf trains to nan silently)."""
    for name, v in values.items():
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise ValueError(f"{owner}: {name} {v!r} must be a finite number >= 0; use e.g. "
                             f"{name}={example[name]}.")


class SGD:
    """torch.optim.SGD(lr, momentum, dampening, weight_decay, nesterov) on parts."""

    def __init__(self, lr: float = 0.01, momentum: float = 0.0, weight_decay: float = 0.0,
                 dampening: float = 0.0, nesterov: bool = False):
        _check_hyper("SGD", {"lr": 0.01, "momentum": 0.9, "weight_decay": 0.0}, lr=lr,
                     momentum=momentum, weight_decay=weight_decay)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: nesterov needs momentum > 0 and dampening 0.")
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.dampening, self.nesterov = dampening, nesterov
        self.step_count = 0
        self.state_names = ("momentum_buffer",) if momentum else ()

    def update(self, p: torch.Tensor, g: torch.Tensor, states) -> None:
        if self.weight_decay:
            g = g.add(p, alpha=self.weight_decay)
        if self.momentum:
            (buf,) = states
            if self.step_count <= 1:
                buf.copy_(g)
            else:
                buf.mul_(self.momentum).add_(g, alpha=1 - self.dampening)
            g = g.add(buf, alpha=self.momentum) if self.nesterov else buf
        p.add_(g, alpha=-self.lr)

    def update_many(self, ps: list, gs: list, states: list) -> None:
        """`update` of many parts with multi-tensor (torch._foreach_*) calls: the same
        element-wise operations in the same order, so the same bits."""
        if self.weight_decay:
            gs = torch._foreach_add(gs, ps, alpha=self.weight_decay)
        if self.momentum:
            bufs = [s[0] for s in states]
            if self.step_count <= 1:
                torch._foreach_copy_(bufs, gs)
            else:
                torch._foreach_mul_(bufs, self.momentum)
                torch._foreach_add_(bufs, gs, alpha=1 - self.dampening)
            gs = torch._foreach_add(gs, bufs, alpha=self.momentum) if self.nesterov else bufs
        torch._foreach_add_(ps, gs, alpha=-self.lr)

    def __repr__(self) -> str:
        return (f"SGD(lr={self.lr}, momentum={self.momentum}, "
                f"weight_decay={self.weight_decay})")

    def torch_optimizer(self, params):
        """The equivalent torch.optim optimizer (the reference in tests)."""
        return torch.optim.SGD(params, lr=self.lr, momentum=self.momentum,
                               weight_decay=self.weight_decay, dampening=self.dampening,
                               nesterov=self.nesterov, foreach=False)


class Adam:
    """torch.optim.Adam(lr, betas, eps, weight_decay) on parts."""

    def __init__(self, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0):
        _check_hyper("Adam", {"lr": 0.001, "eps": 1e-8, "weight_decay": 0.0}, lr=lr, eps=eps,
                     weight_decay=weight_decay)
        if not all(0 <= b < 1 for b in betas):
            raise ValueError(f"Adam: betas {betas} must be in [0, 1); use e.g. (0.9, 0.999).")
        self.lr, self.betas, self.eps, self.weight_decay = lr, tuple(betas), eps, weight_decay
        self.step_count = 0
        self.state_names = ("exp_avg", "exp_avg_sq")

    def update(self, p: torch.Tensor, g: torch.Tensor, states) -> None:
        m, v = states
        b1, b2 = self.betas
        t = self.step_count
        if self.weight_decay:
            g = g.add(p, alpha=self.weight_decay)
        m.lerp_(g, 1 - b1)
        v.mul_(b2).addcmul_(g, g.conj(), value=1 - b2)
        step_size = self.lr / (1 - b1 ** t)
        denom = (v.sqrt() / math.sqrt(1 - b2 ** t)).add_(self.eps)
        p.addcdiv_(m, denom, value=-step_size)

    def update_many(self, ps: list, gs: list, states: list) -> None:
        """`update` of many parts with multi-tensor calls (same operations, same bits)."""
        ms, vs = [s[0] for s in states], [s[1] for s in states]
        b1, b2 = self.betas
        t = self.step_count
        if self.weight_decay:
            gs = torch._foreach_add(gs, ps, alpha=self.weight_decay)
        torch._foreach_lerp_(ms, gs, 1 - b1)
        torch._foreach_mul_(vs, b2)
        torch._foreach_addcmul_(vs, gs, [g.conj() for g in gs], value=1 - b2)
        denom = torch._foreach_sqrt(vs)
        torch._foreach_div_(denom, math.sqrt(1 - b2 ** t))
        torch._foreach_add_(denom, self.eps)
        torch._foreach_addcdiv_(ps, ms, denom, value=-(self.lr / (1 - b1 ** t)))

    def __repr__(self) -> str:
        return f"Adam(lr={self.lr}, betas={self.betas}, eps={self.eps})"

    def torch_optimizer(self, params):
        return torch.optim.Adam(params, lr=self.lr, betas=self.betas, eps=self.eps,
                                weight_decay=self.weight_decay, foreach=False)
