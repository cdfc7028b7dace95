"""The command line every app shares: flags, machine, strategy, training loop, reports.

An app module declares an `App` (its name, its builder, its own flags, a mixed strategy
for demos and tests) and calls `main(APP)`. Everything else lives here, once:

  --batch-size N (global)  --iterations N  --warmup N  --seed S  --dtype float32|float64
  --strategy FILE (import)  --export FILE (the strategy used, data-parallel defaults filled)
  --search SECONDS  --machine PRESET|FILE  --simulate   (need the simulator/search: issues 6, 7)
  --trace FILE (Chrome/Perfetto timeline of the last iteration; one process track per rank)
  --devices-per-rank K  --device auto|cpu|cuda  --threads T  --small  --json
  --data synthetic|digits (image apps: scikit-learn's digits, with accuracy)  --lr LR

Rank 0 prints: the set-up, the strategy table, one line per iteration (progress, time,
samples/s total and per device, loss) and an end report; with --json its last line is one
JSON object (see `result_json`). User errors (bad flags, unusable strategy files, features
not built yet) print one message and exit with status 2, on every rank, without a traceback.

This module owns no model: apps describe networks, parallel_ops trains them. The simulator
and the search plug in at `machine_model`, `search_strategy` and `simulate_run`.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from parallel_ops import SGD, Adam, ConfigError, Model, ParallelConfig, ShapeError  # noqa: E402
from parallel_ops import checkpoint  # noqa: E402
from parallel_ops.config import format_devices  # noqa: E402
from taskrt import Machine  # noqa: E402
from taskrt.discovery import discover_machine, launched_by_mpi  # noqa: E402
from taskrt.trace import to_chrome  # noqa: E402
from strategy import files as strategy_files  # noqa: E402

EXIT_USAGE = 2


class UsageError(Exception):
    """A mistake the user can fix from the command line; printed without a traceback."""


# -- what an app declares ----------------------------------------------------------------------
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
    build: Callable[[argparse.Namespace], Network]
    per_device_batch: int                      # the paper's per-GPU batch
    small_per_device_batch: int = 8
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None
    mixed_strategy: Callable[[Model, int], dict] | None = None
    lr: float = 0.01
    image: bool = False                        # takes --data digits


# -- flags -------------------------------------------------------------------------------------
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
    g.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    g.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd",
                   help="SGD with momentum 0.9 (default), or Adam")
    g.add_argument("--lr", type=float, default=None,
                   help=f"learning rate (default {app.lr} for SGD, 0.001 for Adam)")
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
                   help="search a strategy for this long before training")
    s.add_argument("--machine", metavar="PRESET|FILE",
                   help="the machine to search/simulate for (default: the one running)")
    s.add_argument("--simulate", action="store_true",
                   help="do not train: predict the iteration time on --machine")
    s.add_argument("--devices-per-rank", type=int, default=1, metavar="K",
                   help="devices each rank drives: GPUs, or logical CPU devices (default 1)")
    s.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="auto: CUDA when torch sees GPUs, else CPU")
    s.add_argument("--threads", type=int, default=None, metavar="T",
                   help="torch threads per rank (default 1: tiny parts run fastest on one "
                        "thread, and ranks share cores)")
    o = p.add_argument_group("output")
    o.add_argument("--trace", metavar="FILE", help="Chrome/Perfetto trace of the last iteration")
    o.add_argument("--json", action="store_true",
                   help="rank 0 prints one JSON object with the results as its last line")
    o.add_argument("--quiet", action="store_true", help="no per-iteration lines")
    if app.add_arguments is not None:
        a = p.add_argument_group(f"{app.title}")
        app.add_arguments(a)
    return p


def _check_args(app: App, a: argparse.Namespace) -> None:
    if a.iterations < 1:
        raise UsageError(f"--iterations {a.iterations}: run at least 1 iteration.")
    if a.warmup < 0:
        raise UsageError(f"--warmup {a.warmup}: use 0 or more warm-up iterations.")
    if a.batch_size is not None and a.batch_size < 1:
        raise UsageError(f"--batch-size {a.batch_size}: use a positive global batch size.")
    if a.devices_per_rank < 1:
        raise UsageError(f"--devices-per-rank {a.devices_per_rank}: use 1 or more.")
    if a.checkpoint_every < 0:
        raise UsageError(f"--checkpoint-every {a.checkpoint_every}: use 0 (only at the end) "
                         "or a positive number of iterations.")
    if (a.resume or a.checkpoint_every) and not a.checkpoint_dir:
        flag = "--resume" if a.resume else "--checkpoint-every"
        raise UsageError(f"{flag} needs --checkpoint-dir DIR (where checkpoints live).")
    if a.threads is not None and a.threads < 1:
        raise UsageError(f"--threads {a.threads}: use 1 or more.")
    if a.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: torch sees no GPU here. Use --device cpu, or install "
                         "a CUDA build of torch 2.13 (README, GPUs).")
    for flag in ("strategy",):
        path = getattr(a, flag)
        if path is not None and not os.path.isfile(path):
            raise UsageError(f"--{flag} {path}: no such file. Export one with --export FILE.")


# -- where the simulator and the search plug in ------------------------------------------------
def machine_model(spec: str):
    """The machine model named by --machine (a preset or a file). Needs issue 6."""
    raise UsageError(f"--machine {spec}: machine models (presets such as the paper's P100 and "
                     "K80 clusters, or a machine file) come with the simulator "
                     "(strategy/simulator, issue 6), which is not built yet. Leave out "
                     "--machine to train on the machine this job runs on.")


def search_strategy(app: App, a: argparse.Namespace):
    """The strategy found by --search SECONDS. Needs issue 7."""
    raise UsageError(f"--search {a.search:g}: the strategy search (strategy/search, issue 7) "
                     "is not built yet. Leave out --search to train with data parallelism, "
                     "or pass a strategy file with --strategy FILE.")


def simulate_run(app: App, a: argparse.Namespace):
    """The predicted iteration of --simulate. Needs issue 6."""
    raise UsageError("--simulate: the simulator (strategy/simulator, issue 6) is not built "
                     "yet, so nothing can be predicted. Leave out --simulate to measure a real "
                     "run instead.")


# -- the run -----------------------------------------------------------------------------------
@dataclass
class Result:
    app: App
    args: argparse.Namespace
    network: Network
    machine: Machine
    trainer: object
    strategy_name: str
    losses: list[float]
    times: list[float]                 # seconds per timed iteration
    accuracies: list[float] = field(default_factory=list)
    test_accuracy: float | None = None
    rank: int = 0

    @property
    def iteration_time(self) -> float:
        return statistics.median(self.times)

    @property
    def samples_per_s(self) -> float:
        return self.args.batch_size / self.iteration_time

    def json(self) -> dict:
        return result_json(self)


def _comm():
    from mpi4py import MPI
    return MPI.COMM_WORLD


def _say(rank: int, out):
    if rank != 0 or out is None:
        return lambda *a, **k: None

    def say(*a, **k):
        print(*a, **k, file=out, flush=True)
    return say


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


def machine_text(machine: Machine) -> str:
    kinds = "/".join(sorted({d.kind for d in machine.devices}))
    n, r = len(machine), machine.num_ranks
    return f"{n} {kinds} device{'s' if n > 1 else ''} on {r} rank{'s' if r > 1 else ''}"


def parameters(model: Model) -> int:
    """Trainable scalars (what torch's sum(p.numel() for p in parameters()) counts)."""
    return sum(math.prod(w.shape) for w in model.weights if w.requires_grad)


def _batch_check(machine: Machine, batch: int) -> None:
    """Data parallelism silently uses fewer devices when the batch is smaller than the
    device count; an app asked to train on N devices says so instead."""
    if batch < len(machine):
        raise UsageError(f"--batch-size {batch} cannot be split over {len(machine)} devices: "
                         f"data parallelism needs at least one sample per device. Use a batch "
                         f"of at least {len(machine)} (a multiple of {len(machine)} balances "
                         "the parts), or a strategy file that uses fewer devices.")


def setup(app: App, argv) -> tuple:
    """Parse, discover the machine, build the model and resolve the strategy. Every rank
    runs it; user errors are gathered so that all ranks stop together."""
    mpi = launched_by_mpi()
    rank = _comm().Get_rank() if mpi else 0
    err, a, machine, net, strategy, name = None, None, None, None, None, "data_parallel"
    try:
        parser = make_parser(app)
        if rank != 0:                    # --help prints once
            parser.print_help = lambda *x, **k: None
        a = parser.parse_args(argv)
        _check_args(app, a)
        if a.machine is not None:
            machine_model(a.machine)
        if a.simulate:
            simulate_run(app, a)
        if a.search is not None:
            search_strategy(app, a)
    except UsageError as e:
        err = str(e)
    if err is None:
        torch.set_num_threads(a.threads or 1)
        machine = _machine(a, mpi)       # collective under MPI
        try:
            if a.batch_size is None:
                per = app.small_per_device_batch if a.small else app.per_device_batch
                a.batch_size = per * len(machine)
            if app.image and a.data == "digits":
                a.classes = 10
                _digits()                # fail early when scikit-learn is missing
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
        except UsageError as e:
            err = str(e)
    if mpi:
        errs = _comm().allgather(err)
        first = next(((r, e) for r, e in enumerate(errs) if e is not None), None)
        if first is not None:
            r, e = first
            raise UsageError(e if r == 0 else f"[rank {r}] {e}")
    elif err is not None:
        raise UsageError(err)
    return a, machine, net, strategy, name, rank, mpi


def run(app: App, argv=None, out=...) -> Result:
    """Everything an app does; raises UsageError for mistakes the user can fix. Rank 0's
    report goes to `out` (default: sys.stdout; None: silent)."""
    out = sys.stdout if out is ... else out
    a, machine, net, strategy, strategy_name, rank, mpi = setup(app, argv)
    say = _say(rank, out)
    model = net.model
    size = " --small" if a.small else ""
    say(f"{app.title}{size}: {parameters(model):,} parameters, {len(model.ops)} operators, "
        f"{len(model.weights)} weights; {machine_text(machine)}, torch threads per rank "
        f"{torch.get_num_threads()}")
    say(f"batch {a.batch_size} ({a.batch_size / len(machine):g} per device), {a.dtype}, "
        f"seed {a.seed}, data {getattr(a, 'data', 'synthetic')}, strategy {strategy_name}")
    t = time.perf_counter()
    trainer = model.compile(machine, strategy, optimizer(app, a),
                            record_trace=bool(a.trace), executor="mpi" if mpi else "local")
    say(f"compiled in {time.perf_counter() - t:.2f} s: {trainer.graph.summary()}")
    say(strategy_table(model, trainer.configs))
    if a.export and rank == 0:
        strategy_files.save(a.export, trainer.configs, model, machine)
        say(f"strategy written to {a.export}")
    data = _digits_feeder(net, a) if getattr(a, "data", "synthetic") == "digits" else None
    res = Result(app, a, net, machine, trainer, strategy_name, [], [], rank=rank)
    total = a.warmup + a.iterations
    start = _resume(trainer, a, total, rank, say)
    for it in range(start, total):
        feeds = data.train_batch(it) if data else net.synthetic(a.seed, it)
        if mpi and it == a.warmup:
            _comm().Barrier()
        t = time.perf_counter()
        loss = trainer.step(feeds)
        dt = time.perf_counter() - t
        res.losses.append(loss)
        if it >= a.warmup:
            res.times.append(dt)
        checkpoint.maybe_save(trainer, a.checkpoint_dir, a.checkpoint_every, step=it + 1)
        acc = ""
        if data:
            res.accuracies.append(data.accuracy(trainer.read(net.logits), feeds))
            acc = f"  accuracy {res.accuracies[-1]:.3f}"
        if not a.quiet:
            tag = "  (warm-up)" if it < a.warmup else ""
            sps = a.batch_size / dt
            say(f"iter {it + 1:>{len(str(total))}}/{total} {_bar(it + 1, total)} "
                f"{1e3 * dt:8.1f} ms  {sps:9.1f} samples/s ({sps / len(machine):.1f}/device)  "
                f"loss {loss:.5f}{acc}{tag}")
    if a.checkpoint_dir and (not a.checkpoint_every or total % a.checkpoint_every):
        checkpoint.save_to_dir(trainer, a.checkpoint_dir, total)
    if a.checkpoint_dir:
        say(f"checkpoints in {a.checkpoint_dir} (latest: step {total})")
    if data:
        res.test_accuracy = data.test_accuracy(model, trainer, machine, mpi)
    if a.trace:
        write_trace(a.trace, trainer, machine, mpi, rank)
        say(f"trace of the last iteration written to {a.trace}")
    say(report(res))
    return res


def _resume(trainer, a: argparse.Namespace, total: int, rank: int, say) -> int:
    """The iteration to start from: 0, or the step of the checkpoint --resume loaded."""
    if not a.resume:
        return 0
    try:
        header = checkpoint.resume(trainer, a.checkpoint_dir,
                                   out=sys.stderr if rank == 0 else None)
    except checkpoint.CheckpointError as e:
        raise UsageError(f"--resume: {e}") from None
    if header is None:
        say(f"no checkpoint in {a.checkpoint_dir}: starting from iteration 1")
        return 0
    step = int(header["model"]["step_count"])
    if step >= total:
        raise UsageError(f"--resume: the checkpoint in {a.checkpoint_dir} is at iteration "
                         f"{step}, and this run asks for {total} (--warmup + --iterations). "
                         "Ask for more iterations.")
    say(f"resumed from the checkpoint at iteration {step} in {a.checkpoint_dir}")
    return step


def optimizer(app: App, a: argparse.Namespace):
    if a.optimizer == "adam":
        return Adam(lr=0.001 if a.lr is None else a.lr)
    return SGD(lr=app.lr if a.lr is None else a.lr, momentum=0.9)


def _bar(done: int, total: int, width: int = 20) -> str:
    k = round(width * done / total)
    return "[" + "#" * k + "-" * (width - k) + "]"


def report(res: Result) -> str:
    a, g = res.args, res.trainer.graph
    c = g.count()
    lo, hi = min(res.times), max(res.times)
    lines = [f"Done: {res.app.title}{' --small' if a.small else ''} on "
             f"{machine_text(res.machine)}, batch {a.batch_size}, strategy {res.strategy_name}",
             f"  iteration time  median {1e3 * res.iteration_time:.1f} ms (min {1e3 * lo:.1f}, "
             f"max {1e3 * hi:.1f}) over {len(res.times)} iterations after {a.warmup} warm-up",
             f"  throughput      {res.samples_per_s:.1f} samples/s, "
             f"{res.samples_per_s / len(res.machine):.1f} per device",
             f"  loss            {res.losses[0]:.5f} (first) -> {res.losses[-1]:.5f} (last)",
             f"  per iteration   {c['task']} tasks, {c['copy']} copies, {c['reduce']} "
             f"reductions, {c['allreduce']} all-reduces, {g.bytes_moved() / 1e6:.3f} MB moved"]
    if res.accuracies:
        lines.append(f"  train accuracy  {res.accuracies[0]:.3f} (first batch) -> "
                     f"{res.accuracies[-1]:.3f} (last batch)")
    if res.test_accuracy is not None:
        lines.append(f"  test accuracy   {res.test_accuracy:.3f} on the held-out digits")
    return "\n".join(lines)


def _finite(x):
    return x if x is not None and math.isfinite(x) else None


def result_json(res: Result) -> dict:
    """The --json object: the keys of issue 5 first, then details."""
    a = res.args
    out = {"app": res.app.name,
           "parameters": parameters(res.network.model),
           "batch_size": a.batch_size,
           "iterations": a.iterations,
           "devices": len(res.machine),
           "machine": machine_text(res.machine),
           "simulated": False,
           "iteration_time_s": res.iteration_time,
           "samples_per_s": res.samples_per_s,
           "loss": _finite(res.losses[-1]),
           "strategy": res.strategy_name,
           # details
           "samples_per_s_per_device": res.samples_per_s / len(res.machine),
           "ranks": res.machine.num_ranks,
           "small": a.small,
           "dtype": a.dtype,
           "seed": a.seed,
           "warmup": a.warmup,
           "losses": [_finite(x) for x in res.losses],
           "iteration_times_s": res.times,
           "operators": len(res.network.model.ops),
           "graph": dict(res.trainer.graph.count(),
                         bytes_moved=res.trainer.graph.bytes_moved())}
    if res.accuracies:
        out["accuracies"] = res.accuracies
        out["test_accuracy"] = res.test_accuracy
    return out


def strategy_table(model: Model, configs: dict, max_rows: int = 40) -> str:
    """Operator, type, config and devices; runs of operators with one config share a row
    when the model has more than `max_rows` operators."""
    rows = []
    for op in model.ops:
        cfg = configs[op.name]
        degs = ",".join(f"{k}={v}" for k, v in cfg.degrees if v != 1) or "-"
        key = (degs, format_devices(cfg.devices))
        if len(model.ops) > max_rows and rows and rows[-1][0] == key:
            rows[-1][1].append(op)
        else:
            rows.append((key, [op]))
    names = []
    for _, ops in rows:
        if len(ops) == 1:
            names.append((ops[0].name, ops[0].type))
        else:
            types = sorted({o.type for o in ops})
            t = ",".join(types) if len(types) <= 3 else f"{len(types)} types"
            names.append((f"{ops[0].name} .. {ops[-1].name} ({len(ops)} ops)", t))
    w = max(len("operator"), *(len(n) for n, _ in names))
    tw = max(len("type"), *(len(t) for _, t in names))
    lines = [f"  {'operator':<{w}}  {'type':<{tw}}  {'config':<14} devices"]
    for (key, _), (n, t) in zip(rows, names):
        lines.append(f"  {n:<{w}}  {t:<{tw}}  {key[0]:<14} {key[1]}")
    return "Strategy:\n" + "\n".join(lines)


def write_trace(path: str, trainer, machine: Machine, mpi: bool, rank: int) -> None:
    """One Chrome trace file: a process per rank, a track per device and link."""
    events = getattr(trainer.executor, "trace", [])
    mine = to_chrome(events, process_name=f"rank {rank}")["traceEvents"]
    everyone = _comm().gather(mine, root=0) if mpi else [mine]
    if rank != 0:
        return
    merged = []
    for r, evs in enumerate(everyone):
        for e in evs:
            merged.append(dict(e, pid=r))
    with open(path, "w") as f:
        json.dump({"traceEvents": merged, "displayTimeUnit": "ms"}, f)


# -- real data: scikit-learn's digits -----------------------------------------------------------
def _digits():
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise UsageError("--data digits needs scikit-learn, which ships the digits images: "
                         ".venv/bin/pip install scikit-learn (it is in the 'test' extra).") \
            from None
    d = load_digits()
    return torch.tensor(d.images, dtype=torch.float64), torch.tensor(d.target)


class _DigitsFeeder:
    """1797 8x8 digits: 1500 for training in seeded shuffled epochs, 297 held out. Images
    are standardized, resized to the model's input size and repeated over its channels."""

    def __init__(self, net: Network, a: argparse.Namespace):
        images, labels = _digits()
        g = torch.Generator().manual_seed(a.seed)
        perm = torch.randperm(len(labels), generator=g)
        images, labels = images[perm], labels[perm]
        mean, std = images[:1500].mean(), images[:1500].std()
        self.images = ((images - mean) / std).unsqueeze(1)
        self.labels = labels
        self.net, self.a, self.seed = net, a, a.seed
        self.shape = net.model.tensors[net.image].shape
        self.dtype = getattr(torch, net.model.tensors[net.image].dtype)

    def _pixels(self, idx) -> torch.Tensor:
        x = self.images[idx]
        n, c, h, w = self.shape
        x = torch.nn.functional.interpolate(x, size=(h, w), mode="bilinear",
                                            align_corners=False)
        return x.expand(-1, c, -1, -1).to(self.dtype).contiguous()

    def train_batch(self, it: int) -> dict:
        b = self.shape[0]
        epoch_len = 1500 // b
        epoch, k = divmod(it, epoch_len)
        g = torch.Generator().manual_seed(self.seed * 7919 + epoch)
        idx = torch.randperm(1500, generator=g)[k * b:(k + 1) * b]
        return {self.net.image: self._pixels(idx), self.net.labels: self.labels[idx]}

    def accuracy(self, logits: torch.Tensor, feeds: dict) -> float:
        return (logits.argmax(-1) == feeds[self.net.labels]).double().mean().item()

    def test_accuracy(self, model: Model, trainer, machine: Machine, mpi: bool) -> float:
        """Accuracy on the held-out digits with the trained weights in evaluation mode
        (running batch-norm statistics, no dropout), under the same strategy."""
        ev = model.compile(machine, dict(trainer.configs), None, training=False,
                           executor="mpi" if mpi else "local")
        for w in model.weights:
            if w.name in ev.graph.initial_valid:
                ev.set_weight(w.name, trainer.weight(w.name))
        b = self.shape[0]
        test = torch.arange(1500, len(self.labels))
        right = 0
        for lo in range(0, len(test), b):
            idx = test[lo:lo + b]
            real = len(idx)
            idx = torch.cat([idx, test[:b - real]]) if real < b else idx
            feeds = {self.net.image: self._pixels(idx), self.net.labels: self.labels[idx]}
            ev.step(feeds)
            pred = ev.read(self.net.logits).argmax(-1)
            right += int((pred[:real] == self.labels[idx][:real]).sum())
        return right / len(test)


def _digits_feeder(net: Network, a: argparse.Namespace) -> _DigitsFeeder:
    return _DigitsFeeder(net, a)


# -- entry point -------------------------------------------------------------------------------
def main(app: App, argv=None) -> int:
    """Run an app from the command line; user errors exit with status 2 on every rank."""
    try:
        res = run(app, argv)
    except UsageError as e:
        mpi = launched_by_mpi()
        rank = _comm().Get_rank() if mpi else 0
        if rank == 0:
            print(f"{app.name}: error: {e}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        if mpi:                          # every rank got here: finish quietly, status 2
            from mpi4py import MPI
            MPI.COMM_WORLD.Barrier()
            MPI.Finalize()
            os._exit(EXIT_USAGE)
        return EXIT_USAGE
    if res.args.json and res.rank == 0:
        print(json.dumps(result_json(res)), flush=True)
    return 0


P = ParallelConfig.of
