"""The flags every app shares (`make_parser`) and the checks that need no machine or model:
values (`check_args`), the files a run reads (`check_inputs`) and the places it writes
(`check_outputs`, before any work). Flag mistakes raise UsageError, with the usage line for
argparse's own.

Owns neither the machine nor the model: apps/startup.py uses the parsed flags to build them.
"""
from __future__ import annotations

import argparse
import math
import os

import torch

from parallel_ops.outputs import output_problem
from strategy.machines import presets_text

from .app import App
from .errors import UsageError


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{message}\n{self.format_usage().strip()}")


def make_parser(app: App) -> argparse.ArgumentParser:
    p = _Parser(prog=f"{app.name}.py", description=f"Train {app.title} with soapflow.",
                formatter_class=argparse.RawDescriptionHelpFormatter,
                epilog="Examples:\n"
                       f"  mpirun -np 2 python -m mpi4py apps/{app.name}.py --small\n"
                       f"  python apps/{app.name}.py --small --devices-per-rank 2 "
                       f"--export {app.name}.json\n"
                       f"  mpirun -np 2 python -m mpi4py apps/{app.name}.py --small "
                       f"--strategy {app.name}.json --json")
    g = p.add_argument_group("training")
    g.add_argument("--batch-size", type=int, default=None, metavar="N",
                   help="global batch (default: %d per device, %d with --small)"
                   % (app.per_device_batch, app.small_per_device_batch))
    g.add_argument("--iterations", type=int, default=10, metavar="N",
                   help="timed iterations (default 10)")
    g.add_argument("--warmup", type=int, default=1, metavar="N",
                   help="untimed iterations before them (default 1)")
    g.add_argument("--seed", type=int, default=0, help="weights and synthetic data seed")
    g.add_argument("--dtype", choices=["float32", "float64", "bfloat16"], default="float32",
                   help="bfloat16: mixed precision (bf16 weights, activations and gradients; "
                        "float32 master weights and optimizer state)")
    g.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd",
                   help="SGD with momentum 0.9 (default), or Adam")
    g.add_argument("--lr", type=float, default=None,
                   help=f"learning rate (default {app.lr} for SGD, 0.001 for Adam)")
    g.add_argument("--continue-on-nan", action="store_true",
                   help="keep training when the loss becomes nan or inf (default: stop, "
                        "naming the iteration and the first operator whose output is not "
                        "finite)")
    g.add_argument("--small", action="store_true",
                   help="scaled-down widths and sizes, same topology (CPU demos, tests)")
    if app.image:
        g.add_argument("--data", choices=["synthetic", "digits"], default="synthetic",
                       help="synthetic images, or scikit-learn's 8x8 digits scaled up to the "
                            "input size (10 classes; reports accuracy)")
    c = p.add_argument_group("checkpoints")
    c.add_argument("--checkpoint-dir", metavar="DIR",
                   help="save the full training state here (docs/checkpoints.md)")
    c.add_argument("--checkpoint-every", type=int, default=0, metavar="N",
                   help="save every N iterations (default: once, at the end)")
    c.add_argument("--resume", action="store_true",
                   help="continue from the newest usable checkpoint in --checkpoint-dir, "
                        "under any strategy or number of ranks")
    s = p.add_argument_group("strategy and machine")
    s.add_argument("--strategy", metavar="FILE",
                   help="strategy file to use (msgpack, or .json); default: data parallel")
    s.add_argument("--export", metavar="FILE",
                   help="write the strategy used (data-parallel defaults filled in)")
    s.add_argument("--search", type=float, metavar="SECONDS",
                   help="search a strategy (docs/search.md) for this long before training "
                        "(or simulating, with --simulate)")
    s.add_argument("--search-proposals", type=int, metavar="N",
                   help="with --search: also stop after N proposals, shared out over the "
                        "ranks searching (a search bounded only by proposals repeats exactly "
                        "with the same --seed and ranks: use a large SECONDS)")
    s.add_argument("--search-ranks", type=int, metavar="K",
                   help="with --search under mpirun: how many ranks search, each its own "
                        "chains (seeds --seed, --seed+1, ...), the best strategy found wins "
                        "(default: every rank; 1 searches on rank 0 alone, which also takes "
                        "the least memory)")
    s.add_argument("--check-prediction", type=int, metavar="N",
                   help="with --search (a real run): first train the searched strategy and "
                        "data parallelism N iterations each and print their predicted and "
                        "measured iteration times (docs/simulator.md)")
    s.add_argument("--machine", metavar="PRESET|FILE",
                   help=f"the machine model to simulate/search for: a preset, "
                        f"{presets_text()}; NAME:NODES for another node count (p100:2 is 8 "
                        "GPUs); a machine file; or local (this job, calibrated; the default)")
    s.add_argument("--simulate", action="store_true",
                   help="do not train: predict one iteration on --machine (docs/simulator.md)")
    s.add_argument("--profile", metavar="FILE",
                   help="measured task costs for --simulate (python -m strategy.costs "
                        "profile); default: the analytic cost model")
    s.add_argument("--devices-per-rank", type=int, default=1, metavar="K",
                   help="devices each rank drives: GPUs, or logical CPU devices (default 1)")
    s.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="auto: CUDA when torch sees GPUs, else CPU")
    s.add_argument("--threads", type=int, default=None, metavar="T",
                   help="torch threads per rank (default 1: tiny parts run fastest on one "
                        "thread, and ranks share cores)")
    o = p.add_argument_group("output")
    o.add_argument("--trace", metavar="FILE",
                   help="Chrome/Perfetto trace of the last iteration (only it is traced; "
                   "the iterations before it run and are timed untraced)")
    o.add_argument("--json", action="store_true",
                   help="rank 0 prints one JSON object with the results as its last line")
    o.add_argument("--quiet", action="store_true",
                   help="no per-iteration lines and no progress bars (progress bars show only "
                        "on a terminal)")
    if app.add_arguments is not None:
        a = p.add_argument_group(f"{app.title}")
        app.add_arguments(a)
    return p


def check_args(app: App, a: argparse.Namespace) -> None:
    """Refuse values no run can use (counts below their minimum, flags missing their
    partner, a learning rate that is not a positive number)."""
    if a.iterations < 1:
        raise UsageError(f"--iterations {a.iterations}: run at least 1 iteration.")
    if a.warmup < 0:
        raise UsageError(f"--warmup {a.warmup}: use 0 or more warm-up iterations.")
    if a.batch_size is not None and a.batch_size < 1:
        raise UsageError(f"--batch-size {a.batch_size}: use a positive global batch size.")
    if a.lr is not None and not (math.isfinite(a.lr) and a.lr > 0):
        raise UsageError(f"--lr {a.lr:g}: use a positive, finite learning rate (e.g. "
                         f"{app.lr:g}, the app's default for SGD).")
    if a.devices_per_rank < 1:
        raise UsageError(f"--devices-per-rank {a.devices_per_rank}: use 1 or more.")
    if a.checkpoint_every < 0:
        raise UsageError(f"--checkpoint-every {a.checkpoint_every}: use 0 (only at the end) "
                         "or a positive number of iterations.")
    if (a.resume or a.checkpoint_every) and not a.checkpoint_dir:
        flag = "--resume" if a.resume else "--checkpoint-every"
        raise UsageError(f"{flag} needs --checkpoint-dir DIR (where checkpoints live).")
    if a.search is not None and not a.search > 0:
        raise UsageError(f"--search {a.search:g}: give the search a positive number of "
                         "seconds.")
    if a.threads is not None and a.threads < 1:
        raise UsageError(f"--threads {a.threads}: use 1 or more.")
    if a.check_prediction is not None and (a.search is None or a.simulate or
                                           a.check_prediction < 1):
        raise UsageError(f"--check-prediction {a.check_prediction}: give a positive number of "
                         "iterations, with --search SECONDS and without --simulate (it "
                         "trains both strategies for real).")
    if a.search_ranks is not None and (a.search is None or a.search_ranks < 1):
        raise UsageError(f"--search-ranks {a.search_ranks}: give a positive count, with "
                         "--search SECONDS.")
    if a.search_proposals is not None and (a.search is None or a.search_proposals < 1):
        raise UsageError(f"--search-proposals {a.search_proposals}: give a positive count, "
                         "with --search SECONDS.")


def check_inputs(a: argparse.Namespace) -> None:
    """The files a run reads exist and are used, and the GPU it asks for is there."""
    if a.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: torch sees no GPU here. Use --device cpu, or install "
                         "a CUDA build of torch 2.13 (README, GPUs).")
    fixes = {"strategy": "Export one with --export FILE.",
             "profile": "Measure one with python -m strategy.costs profile APP."}
    for flag, fix in fixes.items():
        path = getattr(a, flag)
        if path is not None and not os.path.isfile(path):
            raise UsageError(f"--{flag} {path}: no such file. {fix}")
    if a.profile is not None and not a.simulate and a.search is None:
        raise UsageError(f"--profile {a.profile}: task costs are for --simulate and --search; "
                         "a real run measures its own. Add --simulate, or leave out "
                         "--profile.")


def check_outputs(a: argparse.Namespace) -> None:
    """Every place the run writes can be written, before any work starts (rank 0 writes)."""
    if a.checkpoint_dir:
        problem = output_problem(a.checkpoint_dir, directory=True)
        if problem:
            raise UsageError(f"--checkpoint-dir {a.checkpoint_dir}: {problem}")
    for flag in ("export", "trace"):
        path = getattr(a, flag)
        problem = output_problem(path) if path else None
        if problem:
            raise UsageError(f"--{flag} {path}: {problem}")
