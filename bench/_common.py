"""Helpers shared by the benchmarks: interleaved timing (in one process, or alternating
between processes or between MPI jobs) and launching MPI workers."""
from __future__ import annotations

import json
import os
import signal
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def interleaved(fns: dict, repeats: int, warmup: int = 2) -> dict:
    """Median seconds per call of each function, calling them in turn so that load changes on
    a shared machine hit all of them alike."""
    for _ in range(warmup):
        for f in fns.values():
            f()
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def _turn_order(names: list, block: int) -> list:
    """Who runs when in a block of turns: in order, and backwards every other block, so that
    each runs after each of the others alike (one fixed order moved a ratio by up to 5%)."""
    return names if block % 2 == 0 else names[::-1]


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def _timing_worker(conn, module: str, factory: str, args: tuple, clock: str = "wall") -> None:
    """Child of `alternating`: build the step with module.factory(*args), then run blocks of
    it on request, sending back each call's seconds (by `clock`: CLOCKS)."""
    import importlib
    now = CLOCKS[clock]
    try:
        step = getattr(importlib.import_module(module), factory)(*args)
        step()
        conn.send("ready")
    except BaseException as exc:                      # reported by the parent
        conn.send(f"{type(exc).__name__}: {exc}")
        return
    while (count := conn.recv()) is not None:
        times = []
        for _ in range(count):
            t = now()
            step()
            times.append(now() - t)
        conn.send(times)


def alternating(makers: dict, blocks: int, per_block: int = 3, warmup: int = 1,
                clock: str = "wall") -> dict:
    """Median seconds per call of each step, each built and run in a process of its own
    (makers: name -> (module, factory, args); factory(*args) returns the step), the processes
    taking turns in blocks of `per_block` calls (_turn_order). As a user runs one or the
    other: neither warms or fragments the other's caches and heap, while turns spread load
    changes of a shared machine over all of them alike. clock "cpu": each call's process
    CPU time instead of wall time (on a shared machine, time spent waiting for a core is
    then not counted; cache and memory contention still are)."""
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    procs = {}
    try:
        for name, (module, factory, args) in makers.items():
            here, there = ctx.Pipe()
            p = ctx.Process(target=_timing_worker,
                            args=(there, module, factory, args, clock), daemon=True)
            p.start()
            procs[name] = (p, here)
        def receive(name, conn):
            try:
                return conn.recv()
            except EOFError:
                raise RuntimeError(f"timing worker '{name}' exited (its output is above)") \
                    from None
        for name, (p, conn) in procs.items():
            msg = receive(name, conn)
            if msg != "ready":
                raise RuntimeError(f"timing worker '{name}' failed to start: {msg}")
        times = {name: [] for name in procs}
        for block in range(warmup + blocks):
            for name in _turn_order(list(procs), block):
                p, conn = procs[name]
                conn.send(per_block)
                got = receive(name, conn)
                if block >= warmup:
                    times[name] += got
        return {name: statistics.median(v) for name, v in times.items()}
    finally:
        for p, conn in procs.values():
            try:
                conn.send(None)
            except OSError:
                pass
            p.join(timeout=10)
            if p.is_alive():
                p.kill()


def _mpi_job(np_: int, script: str, args: list[str]) -> tuple[list[str], dict]:
    """The command and environment that run bench/<script> under mpirun -np N."""
    here = os.path.dirname(sys.executable)
    mpirun = os.environ.get("SOAPFLOW_MPIRUN") or os.path.join(here, "mpirun")
    cmd = [mpirun, "-np", str(np_), sys.executable, "-m", "mpi4py",
           os.path.join(ROOT, "bench", script), *args]
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    return cmd, dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1")


def run_mpi_worker(np_: int, script: str, args: list[str], timeout: float = 900) -> dict:
    """Run bench/<script> under mpirun -np N; it prints one JSON object as its last line."""
    import subprocess
    cmd, env = _mpi_job(np_, script, args)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout,
                       start_new_session=True)
    if p.returncode != 0:
        raise RuntimeError(f"{script} under mpirun -np {np_} failed:\n{p.stdout[-2000:]}"
                           f"\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


# -- MPI jobs taking turns ----------------------------------------------------------------
# `alternating` for whole mpirun jobs: the parent writes whose turn it is into a file of a
# directory both sides know ("<job> <block> <count>", or "stop"); every rank of that job
# runs the block, and its rank 0 writes the block's rows to <job>.<block>.json. Ranks of the
# jobs not running sleep between looks at the file (no core taken from the running job).

_TURN_POLL_S = 0.02


def _write_atomically(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def take_turns(comm, turns: str, job: str, run_block) -> None:
    """Worker side: announce readiness, then run `run_block(count)` (a list of JSON-able
    rows, the same on every rank) whenever it is this job's turn, until told to stop."""
    if comm.Get_rank() == 0:
        _write_atomically(os.path.join(turns, f"{job}.ready"), "")
    seen = None
    while True:
        try:
            with open(os.path.join(turns, "turn")) as f:
                turn = f.read().split()
        except FileNotFoundError:
            turn = []
        if turn == ["stop"]:
            return
        if len(turn) != 3 or turn[0] != job or turn[1] == seen:
            time.sleep(_TURN_POLL_S)
            continue
        seen = turn[1]
        rows = run_block(int(turn[2]))
        if comm.Get_rank() == 0:
            _write_atomically(os.path.join(turns, f"{job}.{seen}.json"), json.dumps(rows))


def alternating_mpi(jobs: dict, blocks: int, per_block: int, warmup: int = 1,
                    timeout: float = 900) -> dict:
    """Run MPI jobs (name -> (ranks, script, args); the script calls `take_turns` with the
    directory and name appended to its args) side by side, taking turns in blocks of
    `per_block` iterations, as `alternating` does for processes; returns name -> the rows of
    its blocks after the first `warmup`, in order."""
    import subprocess
    import tempfile
    deadline = time.monotonic() + timeout
    procs = {}
    with tempfile.TemporaryDirectory(prefix="soapflow-turns-") as turns:
        def wait_for(path: str, what: str) -> str:
            while not os.path.exists(path):
                for name, (p, log) in procs.items():
                    if p.poll() is not None:
                        log.seek(0)
                        raise RuntimeError(f"{jobs[name][1]} ({name}) under mpirun exited "
                                           f"with {p.returncode} while waiting for {what}:\n"
                                           f"{log.read()[-3000:]}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"alternating_mpi: no {what} within {timeout:.0f} s")
                time.sleep(0.01)
            with open(path) as f:
                return f.read()
        try:
            for name, (np_, script, args) in jobs.items():
                cmd, env = _mpi_job(np_, script, [*args, turns, name])
                log = tempfile.TemporaryFile("w+")
                procs[name] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                                text=True, env=env, start_new_session=True),
                               log)
            for name in jobs:
                wait_for(os.path.join(turns, f"{name}.ready"), f"job '{name}' to start")
            rows = {name: [] for name in jobs}
            for block in range(warmup + blocks):
                for name in _turn_order(list(jobs), block):
                    _write_atomically(os.path.join(turns, "turn"),
                                      f"{name} {block} {per_block}")
                    got = json.loads(wait_for(os.path.join(turns, f"{name}.{block}.json"),
                                              f"block {block} of job '{name}'"))
                    if block >= warmup:
                        rows[name] += got
            _write_atomically(os.path.join(turns, "turn"), "stop")
            for name, (p, log) in procs.items():
                p.wait(timeout=max(10.0, deadline - time.monotonic()))
                if p.returncode != 0:
                    log.seek(0)
                    raise RuntimeError(f"{jobs[name][1]} ({name}) under mpirun failed:\n"
                                       f"{log.read()[-3000:]}")
            return rows
        finally:
            for p, log in procs.values():
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
                log.close()
