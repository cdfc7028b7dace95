"""Start a real `mpirun -np N python -m mpi4py ...` job from a test, safely.

The job runs in its own session so a timeout kills every rank; only then are the shared-
memory files it left removed (new ones that no process holds open: other MPI jobs may be
running on this machine, and a normal exit cleans up by itself).
"""
from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def mpirun_path() -> str:
    here = os.path.dirname(sys.executable)
    return os.environ.get("SOAPFLOW_MPIRUN") or (
        os.path.join(here, "mpirun") if os.path.exists(os.path.join(here, "mpirun"))
        else shutil.which("mpirun") or "mpirun")


def _open_files() -> set[str]:
    """Paths some process holds open (from /proc; best effort)."""
    held = set()
    for fd in glob.glob("/proc/[0-9]*/fd/*"):
        try:
            held.add(os.readlink(fd))
        except OSError:
            pass
    return held


def run_mpi(np_: int, args, timeout: float, env=None, cwd=ROOT):
    """Run `python -m mpi4py *args` on np_ ranks; returns (returncode, output, seconds)."""
    cmd = [mpirun_path(), "-np", str(np_), sys.executable, "-m", "mpi4py", *args]
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    e = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=path, **(env or {}))
    before = set(glob.glob("/dev/shm/mpich_shm_*"))
    start = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=e,
                         cwd=cwd, start_new_session=True, text=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        held = _open_files()
        for f in set(glob.glob("/dev/shm/mpich_shm_*")) - before - held:
            try:
                os.unlink(f)
            except OSError:
                pass
        pytest.fail(f"mpirun {args} did not finish in {timeout} s:\n{out[-3000:]}")
    return p.returncode, out, time.perf_counter() - start
