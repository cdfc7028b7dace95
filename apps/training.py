"""The run: compile, resume, the training loop with its per-iteration lines, checkpoints,
the trace and the end report (`run`), and the command-line entry point (`main`).

Set-up is apps/startup.py; the report's text is apps/report.py.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

from parallel_ops import SGD, Adam, checkpoint
from taskrt import Machine
from taskrt.discovery import launched_by_mpi
from taskrt.trace import to_chrome
from strategy import files as strategy_files

from .app import App
from .digits import DigitsFeeder
from .errors import EXIT_USAGE, UsageError
from .hooks import simulate_run
from .report import Result, machine_text, parameters, report, result_json, strategy_table
from .startup import comm_world, setup


def _say(rank: int, out):
    """print to `out` on rank 0; nothing elsewhere or when `out` is None."""
    if rank != 0 or out is None:
        return lambda *a, **k: None

    def say(*a, **k):
        print(*a, **k, file=out, flush=True)
    return say


def run(app: App, argv=None, out=...) -> Result:
    """Everything an app does; raises UsageError for mistakes the user can fix. Rank 0's
    report goes to `out` (default: sys.stdout; None: silent)."""
    out = sys.stdout if out is ... else out
    a, machine, net, strategy, strategy_name, rank, mpi = setup(app, argv)
    if a.simulate:
        if a.export and rank == 0:
            from parallel_ops.lowering import resolve_configs
            strategy_files.save(a.export, resolve_configs(net.model, strategy, machine),
                                net.model, machine)
            _say(rank, out)(f"strategy written to {a.export}")
        return simulate_run(app, a, machine, net, strategy, strategy_name, rank, out)
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
    data = DigitsFeeder(net, a) if getattr(a, "data", "synthetic") == "digits" else None
    res = Result(app, a, net, machine, trainer, strategy_name, [], [], rank=rank)
    total = a.warmup + a.iterations
    start = _resume(trainer, a, total, rank, say)
    for it in range(start, total):
        feeds = data.train_batch(it) if data else net.synthetic(a.seed, it)
        if mpi and it == a.warmup:
            comm_world().Barrier()
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
        write_trace(a.trace, trainer, machine, mpi, rank, app, a)
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
    """--optimizer with --lr, or the app's default learning rate; float32 master weights
    and state under --dtype bfloat16 (mixed precision)."""
    master = a.dtype == "bfloat16"
    if a.optimizer == "adam":
        return Adam(lr=0.001 if a.lr is None else a.lr, master_weights=master)
    return SGD(lr=app.lr if a.lr is None else a.lr, momentum=0.9, master_weights=master)


def _bar(done: int, total: int, width: int = 20) -> str:
    k = round(width * done / total)
    return "[" + "#" * k + "-" * (width - k) + "]"


def write_trace(path: str, trainer, machine: Machine, mpi: bool, rank: int,
                app: App | None = None, a: argparse.Namespace | None = None) -> None:
    """One Chrome trace file: a process per rank, a track per device and link. Its
    "otherData" records what ran (app, flags, layout, strategy, graph fingerprint) so that
    strategy/replay.py can rebuild exactly this graph."""
    events = getattr(trainer.executor, "trace", [])
    mine = to_chrome(events, process_name=f"rank {rank}")["traceEvents"]
    everyone = comm_world().gather(mine, root=0) if mpi else [mine]
    if rank != 0:
        return
    merged = []
    for r, evs in enumerate(everyone):
        for e in evs:
            merged.append(dict(e, pid=r))
    run = {"format": "soapflow-trace", "version": 1, "ranks": machine.num_ranks,
           "devices_per_rank": len(machine.devices_of_rank(0)),
           "device_kind": machine.devices[0].kind,
           "strategy": strategy_files.to_dict(trainer.configs, trainer.model, machine),
           "fingerprint": trainer.graph.fingerprint(), "nodes": len(trainer.graph.nodes)}
    if app is not None and a is not None:
        run.update(app=app.name, argv=list(getattr(a, "argv", [])), batch_size=a.batch_size)
    with open(path, "w") as f:
        json.dump({"traceEvents": merged, "displayTimeUnit": "ms",
                   "otherData": {"soapflow": run}}, f)


def main(app: App, argv=None) -> int:
    """Run an app from the command line; user errors exit with status 2 on every rank."""
    try:
        res = run(app, argv)
    except UsageError as e:
        mpi = launched_by_mpi()
        rank = comm_world().Get_rank() if mpi else 0
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
