"""Optimizers as update tasks over weight parts, numerically equal to torch.optim.

Each replica of a weight part applies the same update to the same all-reduced gradient,
so replicas stay identical without a broadcast. `step_count` is advanced by the trainer
before each iteration; every rank advances it alike. `update_many` does `update` for many
parts in multi-tensor calls (the local executor batches a device's updates:
taskrt.launch, IndexLaunch.batch); an optimizer without it runs one task per part.

Mixed precision (`master_weights=True`, what `--dtype bfloat16` chooses): the model's weights
and gradients are bfloat16 (what forward and backward compute with); the optimizer keeps a
float32 master copy of every weight part as its first state ("master") and its other states
in float32 too; an update casts the gradient to float32, updates the master and writes it
back rounded to the weight. States live in regions partitioned like their weight
(parallel_ops/lowering.py), so the memory model counts them where the weight part lives.
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


class _Optimizer:
    """What SGD and Adam share: state names and dtypes, master weights. Subclasses define
    `_names` (their own states), `_step(p, g, states)` and `_step_many(ps, gs, states)`."""
    _names: tuple = ()

    def _init_precision(self, master_weights: bool) -> None:
        self.master_weights = bool(master_weights)
        self.step_count = 0
        self.state_names = (("master",) if self.master_weights else ()) + self._names

    def state_dtype(self, weight_dtype: str) -> str:
        """The dtype of every state of a weight of `weight_dtype`."""
        return "float32" if self.master_weights else weight_dtype

    def initial_state(self, name: str, weight: torch.Tensor) -> torch.Tensor:
        """The value state `name` of a weight starts from (the master copy: the weight)."""
        dt = getattr(torch, self.state_dtype(str(weight.dtype).removeprefix("torch.")))
        return weight.to(dt) if name == "master" else torch.zeros(weight.shape, dtype=dt)

    def update(self, p: torch.Tensor, g: torch.Tensor, states) -> None:
        if not self.master_weights:
            return self._step(p, g, states)
        master, *rest = states
        self._step(master, g.float(), rest)
        p.copy_(master)

    def update_work(self, shape, weight_dtype: str, grad_dtype: str, step_count: int):
        """(FLOPs, kernels) of `update` on a weight part (strategy/costs/formulas.py):
        the master copy's cast of the gradient and copy back, and the step's kernels."""
        master = self.master_weights
        cast = master and self.state_dtype(weight_dtype) != grad_dtype
        return 0, cast + master + self._step_kernels(step_count)

    def update_many(self, ps: list, gs: list, states: list) -> None:
        """`update` of many parts with multi-tensor (torch._foreach_*) calls: the same
        element-wise operations in the same order, so the same bits."""
        if not self.master_weights:
            return self._step_many(ps, gs, states)
        masters = [s[0] for s in states]
        self._step_many(masters, [g.float() for g in gs], [s[1:] for s in states])
        torch._foreach_copy_(ps, masters)


class SGD(_Optimizer):
    """torch.optim.SGD(lr, momentum, dampening, weight_decay, nesterov) on parts."""

    def __init__(self, lr: float = 0.01, momentum: float = 0.0, weight_decay: float = 0.0,
                 dampening: float = 0.0, nesterov: bool = False, master_weights: bool = False):
        _check_hyper("SGD", {"lr": 0.01, "momentum": 0.9, "weight_decay": 0.0}, lr=lr,
                     momentum=momentum, weight_decay=weight_decay)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: nesterov needs momentum > 0 and dampening 0.")
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.dampening, self.nesterov = dampening, nesterov
        self._names = ("momentum_buffer",) if momentum else ()
        self._init_precision(master_weights)

    def _step(self, p: torch.Tensor, g: torch.Tensor, states) -> None:
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

    def _step_many(self, ps: list, gs: list, states: list) -> None:
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

    def _step_kernels(self, step_count: int) -> int:
        """Kernels of `_step`: weight decay's add, the momentum buffer's copy (first step)
        or mul_ and add_, nesterov's add, the weight's add_."""
        momentum = (1 if step_count <= 1 else 2) if self.momentum else 0
        return bool(self.weight_decay) + momentum + bool(self.momentum and self.nesterov) + 1

    def __repr__(self) -> str:
        return (f"SGD(lr={self.lr}, momentum={self.momentum}, "
                f"weight_decay={self.weight_decay})")

    def torch_optimizer(self, params):
        """The equivalent torch.optim optimizer (the reference in tests)."""
        return torch.optim.SGD(params, lr=self.lr, momentum=self.momentum,
                               weight_decay=self.weight_decay, dampening=self.dampening,
                               nesterov=self.nesterov, foreach=False)


class Adam(_Optimizer):
    """torch.optim.Adam(lr, betas, eps, weight_decay) on parts."""

    def __init__(self, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, master_weights: bool = False):
        _check_hyper("Adam", {"lr": 0.001, "eps": 1e-8, "weight_decay": 0.0}, lr=lr, eps=eps,
                     weight_decay=weight_decay)
        if not all(0 <= b < 1 for b in betas):
            raise ValueError(f"Adam: betas {betas} must be in [0, 1); use e.g. (0.9, 0.999).")
        self.lr, self.betas, self.eps, self.weight_decay = lr, tuple(betas), eps, weight_decay
        self._names = ("exp_avg", "exp_avg_sq")
        self._init_precision(master_weights)

    def _step(self, p: torch.Tensor, g: torch.Tensor, states) -> None:
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

    def _step_many(self, ps: list, gs: list, states: list) -> None:
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

    def _step_kernels(self, step_count: int) -> int:
        """Kernels of `_step`: weight decay's add, lerp_, mul_, addcmul_ (conj of a real
        gradient is itself), sqrt, div, add_, addcdiv_."""
        return bool(self.weight_decay) + 7

    def __repr__(self) -> str:
        return f"Adam(lr={self.lr}, betas={self.betas}, eps={self.eps})"

    def torch_optimizer(self, params):
        return torch.optim.Adam(params, lr=self.lr, betas=self.betas, eps=self.eps,
                                weight_decay=self.weight_decay, foreach=False)
