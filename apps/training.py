"""The run: compile, resume, the training loop with its per-iteration lines, checkpoints,
the trace and the end report (`run`), and the command-line entry point (`main`).

Set-up is apps/startup.py; the report's text is apps/report.py. A loss that becomes nan or
inf stops the run with apps/nonfinite.py's message unless --continue-on-nan. Outputs whose
write fails at the end are kept elsewhere (apps/hooks.py keep_output), never lost.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time

import torch

from parallel_ops import checkpoint
from strategy import files as strategy_files
from strategy.speedref import reference_event, reference_s
from taskrt import Machine
from taskrt.discovery import idle_barrier, launched_by_mpi
from taskrt.trace import UNTRACED_PERIOD, to_chrome

from .app import App
from .digits import DigitsFeeder
from .errors import EXIT_USAGE, UsageError
from .hooks import keep_output, simulate_run
from .nonfinite import nonfinite_report
from .progress import bytes_progress, progress_bar
from .report import Result, machine_text, parameters, report, result_json, strategy_table
from .runconfig import RunConfig
from .startup import Setup, comm_world, optimizer, setup


def _say(rank: int, out):
    """print to `out` on rank 0; nothing elsewhere or when `out` is None."""
    if rank != 0 or out is None:
        return lambda *a, **k: None

    def say(*a, **k):
        print(*a, **k, file=out, flush=True)
    return say


def _export(s: Setup, configs, out) -> None:
    """--export FILE on rank 0 (kept elsewhere, and said, when the write fails)."""
    if s.config.export and s.rank == 0:
        model = s.network.model
        where = keep_output(s.config.export,
                            lambda path: strategy_files.save(path, configs, model, s.machine),
                            "strategy", warn=out is not None)
        _say(0, out)(f"strategy written to {where}")


def run(app: App, argv=None, out=...) -> Result:
    """Everything an app does; raises UsageError for mistakes the user can fix. Rank 0's
    report goes to `out` (default: sys.stdout; None: silent)."""
    out = sys.stdout if out is ... else out
    s = setup(app, argv)
    a, machine, net, rank, mpi = s.config, s.machine, s.network, s.rank, s.mpi
    if a.simulate:
        from parallel_ops.lowering import resolve_configs
        _export(s, resolve_configs(net.model, s.strategy, machine), out)
        return simulate_run(app, s, out)
    say = _say(rank, out)
    model = net.model
    size = " --small" if a.small else ""
    say(f"{app.title}{size}: {parameters(model):,} parameters, {len(model.ops)} operators, "
        f"{len(model.weights)} weights; {machine_text(machine)}, torch threads per rank "
        f"{torch.get_num_threads()}")
    say(f"batch {a.batch_size} ({a.batch_size / len(machine):g} per device), {a.dtype}, "
        f"seed {a.seed}, data {a.data}, strategy {s.strategy_name}")
    for note in s.notes:
        say(note)
    if a.check_prediction:
        from .predictcheck import check_prediction
        check_prediction(s, optimizer, say)
    t = time.perf_counter()
    trainer = model.compile(machine, s.strategy, optimizer(a),
                            record_trace=bool(a.trace), executor="mpi" if mpi else "local")
    say(f"compiled in {time.perf_counter() - t:.2f} s: {trainer.graph.summary()}")
    say(strategy_table(model, trainer.configs))
    _export(s, trainer.configs, out)
    data = DigitsFeeder(net, a) if a.data == "digits" else None
    res = Result(app, a, net, machine, trainer, s.strategy_name, [], [], rank=rank,
                 search=s.search)
    total = a.warmup + a.iterations
    start = _resume(trainer, a, total, rank, say)
    saver = _Checkpoints(trainer, a, rank, out, res)
    timed_from = max(start, a.warmup)      # the first timed iteration
    # --trace traces the last iteration only; with other timed iterations before it, it is
    # kept out of the times and the period (a traced iteration times every node alone)
    traced_apart = bool(a.trace) and total - timed_from >= 2
    trainer.executor.tracing = False
    speed_before = reference_s() if a.trace else None
    for it in range(start, total):
        last = it == total - 1
        apart = traced_apart and last    # the traced iteration, after the timed ones
        if apart:                        # marked before its feeds are made
            res.timed_to = timed_mark(trainer, mpi, "the barrier after the timed iterations")
        t = time.perf_counter()
        feeds = data.train_batch(it) if data else net.synthetic(a.seed, it)
        if it == timed_from:
            res.timed_from = timed_mark(trainer, mpi, "the barrier before the timed iterations")
        elif it > timed_from and not apart:
            res.besides_s += time.perf_counter() - t
        trainer.executor.tracing = bool(a.trace) and last
        t = time.perf_counter()
        loss = trainer.step(feeds)
        dt = time.perf_counter() - t
        res.losses.append(loss)
        if apart:
            res.traced_s = dt
        elif it >= a.warmup:
            res.times.append(dt)
        if loss is not None and not math.isfinite(loss):
            if not a.continue_on_nan:
                raise UsageError(nonfinite_report(trainer, feeds, it + 1, loss))
            if res.nonfinite_from is None:
                res.nonfinite_from = it + 1
                say(f"warning: the loss is {loss} at iteration {it + 1}; training goes on "
                    "(--continue-on-nan)")
        t = time.perf_counter()
        saver.maybe(it + 1)
        acc = ""
        if data:
            res.accuracies.append(data.accuracy(trainer.read(net.logits), feeds))
            acc = f"  accuracy {res.accuracies[-1]:.3f}"
        if it >= timed_from:
            res.besides_s += time.perf_counter() - t
        if not a.quiet:
            tag = "  (warm-up)" if it < a.warmup else ""
            sps = a.batch_size / dt
            say(f"iter {it + 1:>{len(str(total))}}/{total} {_bar(it + 1, total)} "
                f"{1e3 * dt:8.1f} ms  {sps:9.1f} samples/s ({sps / len(machine):.1f}/device)  "
                f"loss {loss:.5f}{acc}{tag}")
    if not traced_apart:
        res.timed_to = timed_mark(trainer, mpi, "the barrier after the timed iterations")
    res.period_s = (res.timed_to - res.timed_from - res.besides_s) / len(res.times)
    if a.trace:
        res.speed_reference = {"before_s": speed_before, "after_s": reference_s()}
    saver.final(total)
    if data:
        res.test_accuracy = data.test_accuracy(model, trainer, machine, mpi)
    if a.trace:
        write_trace(a.trace, trainer, machine, mpi, rank, app, a, out,
                    speed=res.speed_reference,
                    untraced=(res.period_s, len(res.times)) if res.traced_s else None)
    say(report(res))
    return res


def timed_mark(trainer, mpi: bool, what: str) -> float:
    """The clock (perf_counter) at an end of the timed iterations: under MPI once every
    rank got there (a barrier, in the watchdog's guard), so that the time between the two
    marks covers every rank's timed iterations whole (Result.period_s)."""
    if mpi:
        with _watched(trainer, what):
            # sleeping while it waits (a blocking barrier spins: on ranks sharing cores the
            # ranks done first would take time from those still in their last iteration);
            # woken every <= 0.2 ms, a mark is at most that late
            idle_barrier(comm_world(), max_delay=2e-4)
    return time.perf_counter()


def _watched(trainer, what: str):
    """The executor's watchdog guard for a blocking call of the app's own (MPI only)."""
    dog = getattr(trainer.executor, "watchdog", None)
    return dog.watch(what) if dog is not None else contextlib.nullcontext()


class _Checkpoints:
    """--checkpoint-dir/--checkpoint-every: saves with a progress bar on rank 0's terminal,
    their time counted apart from the iterations' (Result.checkpoint_s). A save that fails
    (the disk filled, the directory went away) goes to a directory of the same name in the
    working directory, or the temporary one, with a warning, and later saves follow it."""

    def __init__(self, trainer, config: RunConfig, rank: int, out, res: Result):
        self.trainer, self.config, self.rank, self.out, self.res = trainer, config, rank, out, res
        self.directory = config.checkpoint_dir
        # what a resumed run needs before it builds its model (startup.py)
        self.extra = {"batch_size": config.batch_size, "seed": config.seed}

    def _save(self, step: int) -> None:
        bar = progress_bar(self.out if self.rank == 0 else None, self.config.quiet,
                           f"checkpoint {step}", unit="B", unit_scale=True)

        def write(directory: str) -> None:       # collective: every rank tries alike
            try:
                checkpoint.save_to_dir(self.trainer, directory, step, extra=self.extra,
                                       progress=bytes_progress(bar))
            except checkpoint.CheckpointError as e:
                raise OSError(str(e)) from None
        t = time.perf_counter()
        try:
            self.directory = keep_output(self.directory, write, "checkpoint",
                                         warn=self.rank == 0 and self.out is not None)
        finally:
            bar.close()
        self.res.checkpoint_s += time.perf_counter() - t
        self.res.checkpoints += 1

    def maybe(self, step: int) -> None:
        c = self.config
        if c.checkpoint_dir and c.checkpoint_every and step % c.checkpoint_every == 0:
            self._save(step)

    def final(self, total: int) -> None:
        c = self.config
        if not c.checkpoint_dir:
            return
        if not c.checkpoint_every or total % c.checkpoint_every:
            self._save(total)
        _say(self.rank, self.out)(f"checkpoints in {self.directory} (latest: step {total})")


def _resume(trainer, a: RunConfig, total: int, rank: int, say) -> int:
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


def _bar(done: int, total: int, width: int = 20) -> str:
    k = round(width * done / total)
    return "[" + "#" * k + "-" * (width - k) + "]"


def write_trace(path: str, trainer, machine: Machine, mpi: bool, rank: int,
                app: App | None = None, a: RunConfig | None = None, out=None,
                speed: dict | None = None, untraced: tuple | None = None) -> None:
    """One Chrome trace file: a process per rank, a track per device and link. Its
    "otherData" records what ran (app, flags, layout, strategy, graph fingerprint) so that
    strategy/replay.py can rebuild exactly this graph; `speed` (this rank's {"before_s",
    "after_s"} of strategy/speedref.py around its iterations) becomes the rank's speed
    reference, which calibration uses; `untraced` (period s, iterations) the run's untraced
    timed iterations before the traced one (Result.period_s), which calibration fits the
    iteration factor to (UNTRACED_PERIOD in "otherData"). Rank 0 writes it (kept elsewhere,
    and said, when the write fails). A collective call under MPI."""
    events = getattr(trainer.executor, "trace", [])
    mine = to_chrome(events, process_name=f"rank {rank}",
                     load=getattr(trainer.executor, "trace_load", None))["traceEvents"]
    if speed is not None:
        mine.append(reference_event(speed))
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
        run.update(app=app.name, argv=list(a.argv), batch_size=a.batch_size)
    if untraced is not None:
        run[UNTRACED_PERIOD] = {"period_s": untraced[0], "iterations": untraced[1]}

    def write(where: str) -> None:
        with open(where, "w") as f:
            json.dump({"traceEvents": merged, "displayTimeUnit": "ms",
                       "otherData": {"soapflow": run}}, f)
    where = keep_output(path, write, "trace of the last iteration", warn=out is not None)
    _say(0, out)(f"trace of the last iteration written to {where}")


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
    if res.config.json and res.rank == 0:
        print(json.dumps(result_json(res)), flush=True)
    return 0
