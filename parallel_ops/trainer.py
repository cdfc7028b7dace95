"""Trainer: compile (lower + plan + allocate) once, then step() replays the iteration graph.

    trainer = model.compile(Machine.local(4), strategy, SGD(lr=0.1))
    loss = trainer.step({"x": images, "labels": labels})

Activations, gradients and partial sums are temporaries freed after their last use in the
iteration (taskrt.liveness). What stays readable after step(): weights, optimizer state,
inputs, the graph's results (the loss, outputs nobody consumes) and what they are computed
from (the logits), plus `keep` (tensor or region names like "fc1@grad"; "all" frees nothing).
"""
from __future__ import annotations

import sys
import time
from typing import Iterable, Mapping

import torch

from taskrt import LocalExecutor, Machine, plan
from taskrt.discovery import discover_machine, launched_by_mpi
from taskrt.gcpause import gc_paused

from .config import ParallelConfig, format_devices
from .errors import ShapeError
from .lowering import lower


class Trainer:
    def __init__(self, model, machine: Machine | None = None,
                 strategy: Mapping[str, ParallelConfig] | None = None, optimizer=None,
                 training: bool = True, record_trace: bool = False, executor: str = "auto",
                 keep=None):
        if executor not in ("auto", "local", "mpi"):
            raise ValueError(f"Trainer: executor '{executor}'; use 'auto', 'local' or 'mpi'.")
        use_mpi = executor == "mpi" or (executor == "auto" and launched_by_mpi())
        self.model = model
        self.machine = machine or (discover_machine() if use_mpi else Machine.local(1))
        self.optimizer = optimizer
        self.training = training
        # This trainer's own counts (a second compile of the same model starts a new run
        # at 0; a checkpoint it loads sets them). step() hands them to the model (dropout
        # masks, batch norm's cumulative average read model.step_count) and the optimizer
        # (SGD's first step, Adam's bias correction), which trainers may share.
        self.step_count = 0
        self.optimizer_steps = 0
        # What compiling allocates (launches, the graph, the executor's plans) lives as long
        # as the trainer: collecting mid-compile would walk it again and again (taskrt.gcpause).
        with gc_paused(long_lived=True):
            self.lowered = lower(model, strategy, self.machine, optimizer, training)
            self.configs = self.lowered.configs
            self.graph = plan(self.lowered.launches, self.machine,
                              initial=self.lowered.initial)
            if use_mpi:
                from taskrt.executor.mpi import MPIExecutor
                self.executor = MPIExecutor(self.graph, record_trace=record_trace, keep=keep)
            else:
                self.executor = LocalExecutor(self.graph, record_trace=record_trace, keep=keep)
        with torch.no_grad():
            for w in model.weights:
                if w.name in self.graph.initial_valid:
                    self.executor.write(w.name, model.initial_values[w.name])
            for w, regions in self.lowered.state_regions.items():
                for name, r in zip(optimizer.state_names, regions):
                    self.executor.write(r.name, optimizer.initial_state(
                        name, model.initial_values[w]))

    def _feed(self, feeds: Mapping[str, torch.Tensor]) -> None:
        names = {t.name for t in self.model.inputs}
        missing = sorted(n for n in names - set(feeds) if n in self.graph.initial_valid)
        if missing:
            raise ShapeError(f"step: no data for inputs {missing}; feed every model input.")
        for name, value in feeds.items():
            if name not in names:
                raise ShapeError(f"step: '{name}' is not an input of model "
                                 f"'{self.model.name}'; inputs are {sorted(names)}.")
            t = self.model.tensors[name]
            if tuple(value.shape) != t.shape:
                raise ShapeError(f"step: input '{name}' has shape {tuple(value.shape)}, the "
                                 f"model expects {t.shape}.")
            if name in self.graph.initial_valid:
                self.executor.write(name, value)

    def step(self, feeds: Mapping[str, torch.Tensor]) -> float | None:
        """Run one iteration (forward, backward, update); returns the loss if there is one."""
        self._feed(feeds)
        self.step_count += 1
        self.model.step_count = self.step_count
        if self.optimizer is not None:
            self.optimizer_steps += 1
            self.optimizer.step_count = self.optimizer_steps
        with torch.no_grad():
            self.executor.run()
        if self.lowered.loss_region is None:
            return None
        return float(self.executor.read(self.lowered.loss_region).sum())

    def read(self, name: str) -> torch.Tensor:
        """The full value of a tensor (or `<name>@grad`) after the last step. Under MPI this
        is a collective call: every rank must call it, in the same order."""
        return self.executor.read(name)

    def weight(self, name: str) -> torch.Tensor:
        return self.executor.read(name)

    def weights(self) -> dict[str, torch.Tensor]:
        return {w.name: self.weight(w.name) for w in self.model.weights}

    def set_weight(self, name: str, value: torch.Tensor) -> None:
        with torch.no_grad():
            self.executor.write(name, value)

    def strategy_table(self) -> str:
        rows = [f"{'operator':<24} {'type':<12} {'config':<16} devices"]
        for op in self.model.ops:
            cfg = self.configs[op.name]
            degs = ",".join(f"{k}={v}" for k, v in cfg.degrees if v != 1) or "-"
            rows.append(f"{op.name:<24} {op.type:<12} {degs:<16} {format_devices(cfg.devices)}")
        return "\n".join(rows)

    def fit(self, batches: Iterable[Mapping[str, torch.Tensor]], steps: int | None = None,
            log_every: int = 1, out=sys.stdout) -> list[float]:
        """Train on an iterable of feed dicts; prints step, loss and time per step."""
        losses = []
        t0 = time.perf_counter()
        for i, feeds in enumerate(batches):
            if steps is not None and i >= steps:
                break
            t = time.perf_counter()
            loss = self.step(feeds)
            losses.append(loss)
            if out is not None and log_every and (i + 1) % log_every == 0:
                print(f"step {i + 1}: loss {loss:.5f}  {1e3 * (time.perf_counter() - t):.1f} ms",
                      file=out)
        if out is not None:
            print(f"{len(losses)} steps in {time.perf_counter() - t0:.2f} s", file=out)
        return losses
