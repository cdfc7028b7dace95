"""retain_freed_memory (taskrt/executor/cpumemory.py): an executor with a CPU device keeps
freed memory in the process, so an iteration does not page-fault the memory the previous one
freed; TASKRT_CPU_RETAIN_BYTES=0 leaves malloc alone. Each case runs in a fresh process (the
settings are per process and applied once)."""
import os
import platform
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Allocate and free the same blocks, as a training loop frees and reallocates its
# activations, after building an executor; print the minor page faults of the later rounds.
# 40 MB blocks: glibc's defaults always map blocks over 32 MB afresh (its adaptive threshold
# stops there), so every round faults all their pages again unless memory is retained.
PROGRAM = r"""
import resource, sys, torch
sys.path.insert(0, sys.argv[1])
from taskrt import Machine, plan
from taskrt.executor import cpumemory
from taskrt.executor.local import LocalExecutor
LocalExecutor(plan([], Machine.local(1)))
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def round_():
    a = [torch.ones(10 << 20) for _ in range(2)]
    del a
round_()
round_()
start = faults()
for _ in range(10):
    round_()
print(cpumemory.retain_freed_memory(), faults() - start)
"""


def faults_after(retain: str | None):
    env = dict(os.environ)
    env.pop("TASKRT_CPU_RETAIN_BYTES", None)
    if retain is not None:
        env["TASKRT_CPU_RETAIN_BYTES"] = retain
    r = subprocess.run([sys.executable, "-c", PROGRAM, ROOT], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    applied_again, faults = r.stdout.split()
    assert applied_again == "False"                 # once per process
    return int(faults)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc settings")
def test_freed_memory_is_reused_without_page_faults():
    # 10 rounds of 2 x 40 MB (10240 pages each): every round by default; retained, at most
    # a block once more while the heap settles (heap layout varies from run to run)
    default, retained = faults_after("0"), faults_after(None)
    assert default > 10 * 2 * 10000
    assert retained < default / 5
