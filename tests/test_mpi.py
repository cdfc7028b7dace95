"""Multi-rank execution under a real mpirun (2 and 4 ranks): numerics equal the one-process
run and plain PyTorch, messages equal the graph's copies, and failures end every rank."""
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "mpi"))

from models import MODELS  # noqa: E402
from oracle import reference_steps  # noqa: E402
from parallel_ops import SGD  # noqa: E402
from taskrt import Machine  # noqa: E402

MPIRUN = os.environ.get("SOAPFLOW_MPIRUN") or (
    os.path.join(os.path.dirname(sys.executable), "mpirun")
    if os.path.exists(os.path.join(os.path.dirname(sys.executable), "mpirun"))
    else shutil.which("mpirun") or "mpirun")


def run_mpi(np_, args, timeout, env=None):
    """Run `python -m mpi4py args` under mpirun; returns (returncode, output, seconds)."""
    cmd = [MPIRUN, "-np", str(np_), sys.executable, "-m", "mpi4py", *args]
    e = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT, **(env or {}))
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=e,
                         start_new_session=True, text=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        pytest.fail(f"mpirun {args} did not finish in {timeout} s:\n{out[-3000:]}")
    finally:
        for f in glob.glob("/dev/shm/mpich_shm_*"):
            try:
                if os.stat(f).st_mtime > t - 1:
                    os.unlink(f)
            except OSError:
                pass
    return p.returncode, out, time.perf_counter() - t


@pytest.fixture(scope="module", params=[2, 4], ids=lambda n: f"{n}ranks")
def mpi_results(request, tmp_path_factory):
    n = request.param
    out = tmp_path_factory.mktemp(f"mpi{n}")
    rc, text, _ = run_mpi(n, [os.path.join(ROOT, "tests", "mpi", "checks.py"), str(out)], 600)
    assert rc == 0, text[-4000:]
    return n, [json.load(open(out / f"rank{r}.json")) for r in range(n)]


CASES = [(m, s) for m, (_, strategies) in MODELS.items() for s in strategies(2)]


@pytest.mark.parametrize("model,strategy", CASES, ids=[f"{m}-{s}" for m, s in CASES])
def test_multi_rank_equals_single_process(mpi_results, model, strategy):
    n, per_rank = mpi_results
    key = f"{model}/{strategy}"
    build, strategies = MODELS[model]
    m, feeds = build()
    # Every rank agrees.
    for r in range(1, n):
        assert per_rank[r][key]["losses"] == per_rank[0][key]["losses"]
    got = per_rank[0][key]
    # The same strategy on n logical devices in one process.
    trainer = m.compile(Machine.grid(n, 1), strategies(n)[strategy], SGD(lr=0.1, momentum=0.9))
    local = [trainer.step(feeds) for _ in range(2)]
    assert got["losses"] == pytest.approx(local, rel=1e-12, abs=1e-12)
    # Plain PyTorch.
    ref = reference_steps(m, feeds, SGD(lr=0.1, momentum=0.9), steps=2)
    assert got["losses"] == pytest.approx([r["loss"] for r in ref], rel=1e-9)
    for name, w in ref[-1]["weights"].items():
        assert torch.allclose(torch.tensor(got["weights"][name], dtype=torch.float64), w,
                              rtol=1e-8, atol=1e-10), name
    for name, g in ref[-1]["grads"].items():
        if name in got["grads"]:
            assert torch.allclose(torch.tensor(got["grads"][name], dtype=torch.float64), g,
                                  rtol=1e-8, atol=1e-10), name


@pytest.mark.parametrize("model,strategy", CASES, ids=[f"{m}-{s}" for m, s in CASES])
def test_messages_sent_equal_graph_copies(mpi_results, model, strategy):
    n, per_rank = mpi_results
    for r in range(n):
        rec = per_rank[r][f"{model}/{strategy}"]
        assert rec["sent"] == rec["expected_sent"], f"rank {r}"


@pytest.mark.parametrize("mode", ["raise", "hang"])
def test_failing_rank_brings_all_ranks_down(mode):
    env = {"TASKRT_WATCHDOG_S": "3"}
    rc, out, secs = run_mpi(2, [os.path.join(ROOT, "tests", "mpi", "failing.py"), mode], 90,
                            env=env)
    assert rc != 0
    assert "finished" not in out
    if mode == "raise":
        assert "[rank 1]" in out and "boom in the demo task" in out and "produce" in out
    else:
        assert "no progress" in out and "message from rank 1" in out
    assert secs < 60
