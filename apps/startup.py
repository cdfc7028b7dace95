"""What every rank does before training (`setup` -> `Setup`): parse and check the flags
(including, on rank 0, every place the run will write), discover the machine, build the one
RunConfig, the model and the strategy. With --simulate the devices are those of the
--machine model (default `local`), with --devices-per-rank K logical devices on each. With
--resume the newest checkpoint's global batch is kept unless --batch-size overrides it.

User errors are gathered: under MPI every rank runs the same set-up, the errors are
allgathered once before compiling, and all ranks raise the same UsageError together.
`built_workload` is the same build for the strategy tools (strategy/workload.py).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import torch

from parallel_ops import ConfigError, ShapeError, checkpoint
from strategy import files as strategy_files
from strategy.logical_devices import shared
from strategy.workload import BuiltWorkload
from taskrt import Machine
from taskrt.discovery import discover_machine, launched_by_mpi
from taskrt.errors import PlanError
from taskrt.settings import check_environment

from .app import App, Network
from .digits import digits_tensors
from .errors import UsageError
from .flags import check_args, check_inputs, check_outputs, make_parser
from .hooks import machine_model, search_strategy
from .runconfig import RunConfig


@dataclass(frozen=True)
class Setup:
    """Everything a run starts from, the same on every rank."""
    config: RunConfig
    machine: Machine                     # the runtime's devices
    machine_model: object | None         # --simulate's model (with its logical devices)
    network: Network
    strategy: dict
    strategy_name: str
    rank: int
    mpi: bool
    search: object | None = None         # the SearchResult of --search
    notes: tuple[str, ...] = ()          # what rank 0 says before training (resume)


def comm_world():
    """MPI.COMM_WORLD (mpi4py is imported only under MPI)."""
    from mpi4py import MPI
    return MPI.COMM_WORLD


def optimizer(config: RunConfig):
    """--optimizer with the learning rate in force; float32 master weights and state under
    --dtype bfloat16 (mixed precision)."""
    from parallel_ops import SGD, Adam
    master = config.dtype == "bfloat16"
    if config.optimizer == "adam":
        return Adam(lr=config.lr, master_weights=master)
    return SGD(lr=config.lr, momentum=0.9, master_weights=master)


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


def _network(app: App, config: RunConfig) -> Network:
    if app.image and config.data == "digits":
        digits_tensors()         # fail early when scikit-learn is missing
    try:
        return app.build(config)
    except (ShapeError, ConfigError) as e:   # sizes from flags that do not fit
        raise UsageError(f"cannot build {app.title} with these sizes: {e}") from None


def build_network(app: App, config: RunConfig, machine: Machine) -> tuple:
    """(network, strategy, strategy name) for this configuration on `machine`: the model
    and the strategy file checked against both."""
    net = _network(app, config)
    strategy, name = {}, "data_parallel"
    if config.strategy:
        try:
            strategy = strategy_files.load(config.strategy, net.model, machine)
        except strategy_files.StrategyFileError as e:
            raise UsageError(str(e)) from None
        name = config.strategy
    if any(op.name not in strategy for op in net.model.ops):
        _batch_check(machine, config.batch_size)
    return net, strategy, name


def built_workload(app: App, argv, devices: int, batch_size: int | None = None
                   ) -> BuiltWorkload:
    """App.build_from_flags: the model of these flags on `devices` devices, for the strategy
    tools. Only the values are checked: files the flags name may be gone (a replayed run)."""
    argv = list(argv)
    a = make_parser(app).parse_args(argv)
    check_args(app, a)
    if batch_size is not None:
        a.batch_size = batch_size
    config = RunConfig.from_flags(app, a, argv, devices)
    net = _network(app, config)
    return BuiltWorkload(app.name, net.model, optimizer(config), config.batch_size,
                         dict(net.int_ranges), config.strategy, config.devices_per_rank,
                         app.mixed_strategy, app.expert, net.synthetic)


def _machine_model(a: argparse.Namespace):
    """--machine is for --simulate and --search; --simulate's model (default `local`)."""
    if a.machine is not None and not a.simulate and a.search is None:
        raise UsageError(f"--machine {a.machine}: a machine model is for --simulate (predict "
                         "an iteration on it) and --search (find a strategy for it); a real "
                         "run trains on the devices this job runs on. Add --simulate, or "
                         "leave out --machine.")
    if a.simulate:
        return shared(machine_model(a.machine or "local"), a.devices_per_rank)
    return None


def _checkpoint_header(a: argparse.Namespace, mpi: bool, rank: int) -> dict | None:
    """With --resume: the header of the checkpoint it will load (rank 0 reads, all get it)."""
    if not a.resume:
        return None
    header = checkpoint.newest_header(a.checkpoint_dir) if rank == 0 else None
    return comm_world().bcast(header, root=0) if mpi else header


def resume_notes(config: RunConfig, header: dict | None, devices: int) -> tuple[str, ...]:
    """What a resumed run keeps from its checkpoint and what it changes, said either way."""
    if header is None:
        return ()
    notes = []
    saved = (header.get("extra") or {}).get("batch_size")
    per = f"{config.batch_size / devices:g} per device on {devices}"
    if config.batch_source == "checkpoint":
        notes.append(f"resume: keeping the checkpoint's global batch {config.batch_size} "
                     f"({per}); --batch-size N changes it")
    elif saved is None:
        notes.append(f"resume: the checkpoint does not record its global batch; using "
                     f"{config.batch_size} ({per})")
    elif int(saved) != config.batch_size:
        notes.append(f"resume: --batch-size {config.batch_size} ({per}) replaces the "
                     f"checkpoint's global batch {saved}")
    else:
        notes.append(f"resume: global batch {config.batch_size} ({per}), as in the checkpoint")
    seed = header.get("model", {}).get("seed")
    if seed is not None and int(seed) != config.seed:
        notes.append(f"resume: --seed {config.seed} differs from the checkpoint's seed {seed}: "
                     f"the weights, optimizer state and dropout continue from the checkpoint "
                     f"(seed {seed}); the synthetic data from here follows seed {config.seed}. "
                     f"Use --seed {seed} to continue the same run.")
    return tuple(notes)


def _agree(err: str | None, mpi: bool) -> None:
    """Raise the first rank's error on every rank (allgather under MPI), or nothing."""
    errs = comm_world().allgather(err) if mpi else [err]
    first = next(((r, e) for r, e in enumerate(errs) if e is not None), None)
    if first is not None:
        r, e = first
        raise UsageError(e if r == 0 else f"[rank {r}] {e}")


def setup(app: App, argv) -> Setup:
    """Parse, discover the machine, build the configuration, the model and the strategy.
    Every rank runs it; user errors are gathered so that all ranks stop together (before
    the first collective call, and again after building)."""
    mpi = launched_by_mpi()
    rank = comm_world().Get_rank() if mpi else 0
    err, a, mm = None, None, None
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = make_parser(app)
        if rank != 0:                    # --help prints once
            parser.print_help = lambda *x, **k: None
        a = parser.parse_args(argv)
        check_args(app, a)
        check_inputs(a)
        if rank == 0:                    # rank 0 writes every output
            check_outputs(a)
        mm = _machine_model(a)
        check_environment()
    except (UsageError, PlanError) as e:  # PlanError: a TASKRT_* variable the runtime refuses
        err = str(e)
    _agree(err, mpi)
    torch.set_num_threads(a.threads or 1)
    # the runtime's devices: the model's with --simulate, else discovered (collective)
    machine = mm.taskrt_machine() if a.simulate else _machine(a, mpi)
    header = _checkpoint_header(a, mpi, rank)
    config = RunConfig.from_flags(app, a, argv, len(machine),
                                  (header or {}).get("extra", {}).get("batch_size"))
    net, strategy, name = None, {}, "data_parallel"
    try:
        net, strategy, name = build_network(app, config, machine)
    except UsageError as e:
        err = str(e)
    _agree(err, mpi)
    found = None
    if config.search is not None:        # every rank gets here, and gets the same result
        strategy, name, found = search_strategy(app, config, mm, machine, net, strategy, name,
                                                rank, mpi, out=sys.stdout)
    return Setup(config, machine, mm, net, strategy, name, rank, mpi, found,
                 resume_notes(config, header, len(machine)))
