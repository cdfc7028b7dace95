"""What an app declares: its `App` record (name, builder, flags, mixed strategy) and the
`Network` its builder returns (the model plus what the data feeder needs to know).

An App is also what the strategy tools take (strategy/workload.py's Workload: `main` and
`build_from_flags`), so `python -m strategy` runs apps, and user files defining an APP,
without importing this package. Owns no command line and no training loop (apps/flags.py,
apps/training.py).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Callable

import torch

from parallel_ops import Model


@dataclass
class Network:
    """A built model plus what the data feeder needs to know about its inputs."""
    model: Model
    int_ranges: dict[str, int]                 # integer input -> exclusive upper bound
    logits: str | None = None                  # classifier output (accuracy with --data)
    fixed: dict[str, torch.Tensor] = field(default_factory=dict)  # same value every step
    image: str | None = None                   # the image input of a CNN (for --data)
    labels: str | None = None                  # its labels input

    def synthetic(self, seed: int, iteration: int) -> dict[str, torch.Tensor]:
        """A batch that depends only on (seed, iteration): every rank draws the same one."""
        g = torch.Generator().manual_seed(seed * 1_000_003 + iteration)
        feeds = {}
        for t in self.model.inputs:
            if t.name in self.fixed:
                feeds[t.name] = self.fixed[t.name]
            elif t.name in self.int_ranges:
                feeds[t.name] = torch.randint(0, self.int_ranges[t.name], t.shape, generator=g)
            else:
                feeds[t.name] = torch.randn(t.shape, generator=g,
                                            dtype=getattr(torch, t.dtype))
        return feeds


@dataclass
class App:
    name: str                                  # command name, e.g. "inception"
    title: str                                 # e.g. "Inception-v3"
    build: Callable[["RunConfig"], Network]   # apps/runconfig.py
    per_device_batch: int                      # the paper's per-GPU batch
    small_per_device_batch: int = 8
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None
    mixed_strategy: Callable[[Model, int], dict] | None = None
    expert: str | None = None                  # the paper's expert: strategy/experts.py
    lr: float = 0.01
    image: bool = False                        # takes --data digits
    # FLOPs per iteration of the config's model (as built, or as the search left it)
    model_flops: Callable[["RunConfig", Model], float] | None = None
    # name -> activation-recomputation segments the search may choose among (its --recompute
    # flag's choices; parallel_ops/recompute.py)
    recompute_plans: Callable[[Model], dict] | None = None
    # --search's search when the app has its own: (config, network, machine model, cost
    # model, **strategy.search.search's knobs) -> SearchResult (the GPT's: apps/gpt.py)
    search: Callable[..., object] | None = None

    def main(self, argv=None) -> int:
        """The app's command line (apps/training.py main); the exit status."""
        from .training import main
        return main(self, argv)

    def build_from_flags(self, argv, devices: int, batch_size: int | None = None):
        """The model these flags build on `devices` devices, as strategy.workload's
        BuiltWorkload; a UsageError (a WorkloadError) for flags the app refuses."""
        from .startup import built_workload
        return built_workload(self, argv, devices, batch_size)
