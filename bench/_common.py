"""Helpers shared by the benchmarks: interleaved timing (in one process, or alternating
between processes) and launching MPI workers."""
from __future__ import annotations

import json
import os
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


def _timing_worker(conn, module: str, factory: str, args: tuple) -> None:
    """Child of `alternating`: build the step with module.factory(*args), then run blocks of
    it on request, sending back each call's seconds."""
    import importlib
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
            t = time.perf_counter()
            step()
            times.append(time.perf_counter() - t)
        conn.send(times)


def alternating(makers: dict, blocks: int, per_block: int = 3, warmup: int = 1) -> dict:
    """Median seconds per call of each step, each built and run in a process of its own
    (makers: name -> (module, factory, args); factory(*args) returns the step), the processes
    taking turns in blocks of `per_block` calls. As a user runs one or the other: neither
    warms or fragments the other's caches and heap, while turns spread load changes of a
    shared machine over all of them alike."""
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    procs = {}
    try:
        for name, (module, factory, args) in makers.items():
            here, there = ctx.Pipe()
            p = ctx.Process(target=_timing_worker, args=(there, module, factory, args),
                            daemon=True)
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
            for name, (p, conn) in procs.items():
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


def run_mpi_worker(np_: int, script: str, args: list[str], timeout: float = 900) -> dict:
    """Run bench/<script> under mpirun -np N; it prints one JSON object as its last line."""
    import subprocess
    here = os.path.dirname(sys.executable)
    mpirun = os.environ.get("SOAPFLOW_MPIRUN") or os.path.join(here, "mpirun")
    cmd = [mpirun, "-np", str(np_), sys.executable, "-m", "mpi4py",
           os.path.join(ROOT, "bench", script), *args]
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout,
                       start_new_session=True)
    if p.returncode != 0:
        raise RuntimeError(f"{script} under mpirun -np {np_} failed:\n{p.stdout[-2000:]}"
                           f"\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])
