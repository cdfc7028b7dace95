"""Multi-rank execution under a real mpirun (2 and 4 ranks): numerics equal the one-process
run and plain PyTorch, messages equal the graph's copies, and failures end every rank."""
import json
import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "mpi"))

from models import MODELS  # noqa: E402
from mpi_launch import run_mpi  # noqa: E402
from oracle import reference_steps  # noqa: E402
from parallel_ops import SGD  # noqa: E402
from taskrt import Machine  # noqa: E402

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


@pytest.mark.parametrize("model,strategy", CASES, ids=[f"{m}-{s}" for m, s in CASES])
def test_a_trace_has_one_event_per_node_of_the_rank(mpi_results, model, strategy):
    """Posting a receive is no event of its own: a copy from another rank is traced once,
    when it is unpacked (the simulator's calibration reads these traces)."""
    n, per_rank = mpi_results
    for r in range(n):
        traced = per_rank[r][f"{model}/{strategy}"]["traced"]
        if traced:
            events, nodes = traced
            assert sorted(events) == nodes, f"rank {r}"


@pytest.mark.parametrize("model", list(MODELS))
def test_ready_updates_run_in_batches(mpi_results, model):
    """Under data parallelism a bucket's all-reduce readies several updates at once; the
    executor runs them as one batch (their numbers are checked above)."""
    n, per_rank = mpi_results
    for r in range(n):
        assert per_rank[r][f"{model}/data_parallel"]["batched"] > 1, f"rank {r}"


@pytest.mark.parametrize("mode", ["raise", "stop"])
def test_failing_rank_brings_all_ranks_down(mode):
    """A rank that raises ends the job at once; a rank stopped with SIGSTOP (it can neither
    work nor exit) is found by the watchdog, which is on by default with a limit derived
    from the measured iterations (here its floor, lowered to 2 s), names the rank that waits
    and for what, and ends the job."""
    env = {"TASKRT_WATCHDOG_FLOOR_S": "2"}
    rc, out, secs = run_mpi(2, [os.path.join(ROOT, "tests", "mpi", "failing.py"), mode], 90,
                            env=env)
    what = f"exit status {rc} after {secs:.1f} s, output:\n{out[-3000:]}"
    assert rc != 0, what
    assert "finished" not in out, what
    if mode == "raise":
        assert "[rank 1]" in out and "boom in the demo task" in out and "produce" in out, what
    else:
        assert "[rank 0] watchdog: an iteration still waits after" in out, what
        assert "TASKRT_WATCHDOG_FLOOR_S" in out, what
        assert "rank 0 is waiting for:" in out and "message from rank 1" in out, what
    assert secs < 60, what
