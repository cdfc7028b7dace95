"""Start a real `mpirun -np N python -m mpi4py ...` job from a test, safely.

The job runs in its own session so a timeout kills every rank; after a timeout or a job that
ended in error (MPI_Abort leaves them too) the shared-memory files it left are removed (new
ones that no process holds open or mapped: other MPI jobs may be running on this machine,
and a normal exit cleans up by itself).
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
    """Paths some process holds open or has mapped (from /proc; best effort)."""
    held = set()
    for fd in glob.glob("/proc/[0-9]*/fd/*"):
        try:
            held.add(os.readlink(fd))
        except OSError:
            pass
    for maps in glob.glob("/proc/[0-9]*/maps"):
        try:
            with open(maps) as f:
                held.update(line.split(None, 5)[-1].strip() for line in f if "/dev/shm/" in line)
        except OSError:
            pass
    return held


def _remove_left_shm(before: set[str], wait_s: float = 3.0) -> None:
    """Remove the new files nobody holds; the job's killed ranks may take a moment to go."""
    left = set(glob.glob("/dev/shm/mpich_shm_*")) - before
    deadline = time.monotonic() + wait_s
    while left:
        for f in left - _open_files():
            try:
                os.unlink(f)
            except OSError:
                pass
        left = {f for f in left if os.path.exists(f)}
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)


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
        _remove_left_shm(before)
        pytest.fail(f"mpirun {args} did not finish in {timeout} s:\n{out[-3000:]}")
    if p.returncode != 0:
        _remove_left_shm(before)
    return p.returncode, out, time.perf_counter() - start
