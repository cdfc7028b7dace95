"""The fixed configuration the app tests run every app at, shared by the one-process tests
and the mpirun runner: --small, global batch 8, float64, 2 iterations without warm-up;
strategies 'data_parallel' (no file) and 'mixed' (the app's mixed_strategy written to a
strategy file). ResNet runs at depth 50 to keep the suite fast (101 only adds blocks)."""
from __future__ import annotations

import importlib
import os

import torch

from apps.common import run
from strategy import files
from taskrt import Machine

EXTRA = {"resnet": ["--depth", "50"]}
STRATEGIES = ("data_parallel", "mixed")


def app_module(name: str):
    return importlib.import_module(f"apps.{name}")


def base_argv(name: str) -> list[str]:
    return ["--small", "--batch-size", "8", "--iterations", "2", "--warmup", "0",
            "--dtype", "float64", "--quiet", *EXTRA.get(name, [])]


def strategy_path(out_dir: str, name: str) -> str:
    return os.path.join(out_dir, f"{name}_mixed.json")


def write_mixed(name: str, out_dir: str, devices: int = 2) -> str:
    """Write the app's mixed strategy for `devices` devices to a JSON strategy file."""
    app = app_module(name).APP
    net = app.build_from_flags(base_argv(name), devices)
    path = strategy_path(out_dir, name)
    files.save(path, app.mixed_strategy(net.model, devices), net.model, Machine.local(devices))
    return path


def run_case(name: str, strategy: str, out_dir: str, devices_per_rank: int = 1):
    """Run an app at the fixed configuration; returns (Result, weights)."""
    app = app_module(name).APP
    argv = base_argv(name) + ["--devices-per-rank", str(devices_per_rank)]
    if strategy == "mixed":
        argv += ["--strategy", strategy_path(out_dir, name)]
    res = run(app, argv, out=None)
    weights = {k: v.clone() for k, v in res.trainer.weights().items()}
    return res, weights


def save_result(path: str, res, weights) -> None:
    torch.save({"losses": res.losses, "json": res.json(), "weights": weights}, path)


def load_result(path: str) -> dict:
    return torch.load(path, weights_only=True)
