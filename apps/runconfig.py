"""The run's configuration: one frozen `RunConfig`, built once from the parsed flags and the
number of devices (`RunConfig.from_flags`), read by everything after it; nothing sets a
field later. Defaults that depend on the app or the machine (global batch, learning rate,
classes with --data digits) are resolved here, in one place.

An app's own flags (--depth, --vocab, ...) are in `app_flags` and read as attributes too
(`config.depth`), so builders take the config the way they took argparse's Namespace.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Mapping

from .app import App


@dataclass(frozen=True)
class RunConfig:
    app: str
    argv: tuple[str, ...]
    batch_size: int                   # global
    batch_source: str                 # "--batch-size", "default" or "checkpoint"
    iterations: int
    warmup: int
    seed: int
    dtype: str
    optimizer: str
    lr: float
    small: bool
    data: str
    checkpoint_dir: str | None
    checkpoint_every: int
    resume: bool
    strategy: str | None
    export: str | None
    search: float | None
    search_proposals: int | None
    search_ranks: int | None           # ranks that search (None: all)
    check_prediction: int | None       # --check-prediction N: run best and data parallel
    machine: str | None
    simulate: bool
    profile: str | None
    devices_per_rank: int
    device: str
    threads: int | None
    trace: str | None
    json: bool
    quiet: bool
    continue_on_nan: bool
    app_flags: Mapping[str, object] = field(default_factory=dict)

    def __getattr__(self, name: str):
        # only called when `name` is not a field: the app's own flags
        flags = self.__dict__.get("app_flags", {})
        if name in flags:
            return flags[name]
        raise AttributeError(f"RunConfig has no flag '{name}'")

    @staticmethod
    def from_flags(app: App, ns: argparse.Namespace, argv, devices: int,
                   checkpoint_batch: int | None = None) -> "RunConfig":
        """The configuration of a run on `devices` devices. The global batch is --batch-size,
        else the resumed checkpoint's (`checkpoint_batch`), else the app's per-device batch
        times the devices."""
        common = {f.name for f in fields(RunConfig)}
        values = vars(ns)
        app_flags = {k: v for k, v in values.items() if k not in common}
        if values.get("data") == "digits":
            app_flags["classes"] = 10
        if ns.batch_size is not None:
            batch, source = ns.batch_size, "--batch-size"
        elif checkpoint_batch is not None:
            batch, source = checkpoint_batch, "checkpoint"
        else:
            per = app.small_per_device_batch if ns.small else app.per_device_batch
            batch, source = per * devices, "default"
        lr = ns.lr if ns.lr is not None else (0.001 if ns.optimizer == "adam" else app.lr)
        given = {k: v for k, v in values.items() if k in common}
        given.update(app=app.name, argv=tuple(argv), batch_size=batch, batch_source=source,
                     lr=lr, data=values.get("data", "synthetic"),
                     app_flags=MappingProxyType(app_flags))
        return RunConfig(**given)
