"""What every rank does before training: parse and check the flags, discover the machine,
build the model and resolve the strategy (`setup`). With --simulate the devices are those of
the --machine model (default `local`), with --devices-per-rank K logical devices on each.

User errors are gathered: under MPI every rank runs the same set-up, the errors are
allgathered once before compiling, and all ranks raise the same UsageError together.
"""
from __future__ import annotations

import argparse
import sys

import torch

from parallel_ops import ConfigError, ShapeError
from strategy import files as strategy_files
from strategy.logical_devices import shared
from taskrt import Machine
from taskrt.discovery import discover_machine, launched_by_mpi
from taskrt.errors import PlanError
from taskrt.settings import check_environment

from .app import App
from .digits import digits_tensors
from .errors import UsageError
from .flags import check_args, make_parser
from .hooks import machine_model, search_strategy


def comm_world():
    """MPI.COMM_WORLD (mpi4py is imported only under MPI)."""
    from mpi4py import MPI
    return MPI.COMM_WORLD


def _machine(a: argparse.Namespace, mpi: bool) -> Machine:
    kind = a.device
    if kind == "auto":
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    if mpi:
        if kind == "cuda":
            return discover_machine(use_gpus=True, gpus_per_rank=a.devices_per_rank)
        return discover_machine(use_gpus=False, cpu_devices=a.devices_per_rank)
    if kind == "cuda":
        return Machine.local(a.devices_per_rank, "cuda", num_gpus=torch.cuda.device_count())
    return Machine.local(a.devices_per_rank)


def _batch_check(machine: Machine, batch: int) -> None:
    """Data parallelism silently uses fewer devices when the batch is smaller than the
    device count; an app asked to train on N devices says so instead."""
    if batch < len(machine):
        raise UsageError(f"--batch-size {batch} cannot be split over {len(machine)} devices: "
                         f"data parallelism needs at least one sample per device. Use a batch "
                         f"of at least {len(machine)} (a multiple of {len(machine)} balances "
                         "the parts), or a strategy file that uses fewer devices.")


def build_network(app: App, a: argparse.Namespace, machine: Machine) -> tuple:
    """(network, strategy, strategy name) for these flags on `machine`: the global batch
    (per-device batch times the devices unless --batch-size), the model, the strategy file
    checked against both. Shared by setup and strategy/replay.py (rebuilding a run)."""
    name = "data_parallel"
    if a.batch_size is None:
        per = app.small_per_device_batch if a.small else app.per_device_batch
        a.batch_size = per * len(machine)
    if app.image and a.data == "digits":
        a.classes = 10
        digits_tensors()         # fail early when scikit-learn is missing
    try:
        net = app.build(a)
    except (ShapeError, ConfigError) as e:   # sizes from flags that do not fit
        raise UsageError(f"cannot build {app.title} with these sizes: {e}") from None
    strategy = {}
    if a.strategy:
        try:
            strategy = strategy_files.load(a.strategy, net.model, machine)
        except strategy_files.StrategyFileError as e:
            raise UsageError(str(e)) from None
        name = a.strategy
    dp_ops = [op for op in net.model.ops if op.name not in strategy]
    if dp_ops:
        _batch_check(machine, a.batch_size)
    return net, strategy, name


def _machine_flags(a: argparse.Namespace) -> None:
    """--machine is for --simulate and --search; --simulate's model (default `local`)."""
    a.machine_model = None
    if a.machine is not None and not a.simulate and a.search is None:
        raise UsageError(f"--machine {a.machine}: a machine model is for --simulate (predict "
                         "an iteration on it) and --search (find a strategy for it); a real "
                         "run trains on the devices this job runs on. Add --simulate, or "
                         "leave out --machine.")
    if a.simulate:
        a.machine_model = shared(machine_model(a.machine or "local"), a.devices_per_rank)


def setup(app: App, argv) -> tuple:
    """Parse, discover the machine, build the model and resolve the strategy. Every rank
    runs it; user errors are gathered so that all ranks stop together."""
    mpi = launched_by_mpi()
    rank = comm_world().Get_rank() if mpi else 0
    err, a, machine, net, strategy, name = None, None, None, None, None, "data_parallel"
    try:
        parser = make_parser(app)
        if rank != 0:                    # --help prints once
            parser.print_help = lambda *x, **k: None
        argv = list(sys.argv[1:] if argv is None else argv)
        a = parser.parse_args(argv)
        a.argv = argv                    # recorded in --trace files (replay rebuilds the run)
        check_args(app, a)
        _machine_flags(a)
        check_environment()
    except UsageError as e:
        err = str(e)
    except PlanError as e:               # a TASKRT_* variable the runtime refuses
        err = str(e)
    if err is None:
        torch.set_num_threads(a.threads or 1)
        # the runtime's devices: the model's with --simulate, else discovered (collective)
        machine = a.machine_model.taskrt_machine() if a.simulate else _machine(a, mpi)
        try:
            net, strategy, name = build_network(app, a, machine)
        except UsageError as e:
            err = str(e)
    if mpi:
        errs = comm_world().allgather(err)
        first = next(((r, e) for r, e in enumerate(errs) if e is not None), None)
        if first is not None:
            r, e = first
            raise UsageError(e if r == 0 else f"[rank {r}] {e}")
    elif err is not None:
        raise UsageError(err)
    if a.search is not None:             # every rank gets here, and gets the same result
        strategy, name = search_strategy(app, a, machine, net, strategy, name, rank, mpi,
                                         out=sys.stdout)
    return a, machine, net, strategy, name, rank, mpi
