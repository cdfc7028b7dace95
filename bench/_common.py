"""Helpers shared by the benchmarks: interleaved timing and launching MPI workers."""
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
