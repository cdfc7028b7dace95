"""Checkpoints across rank counts under a real mpirun (one launch of 2 ranks): saved by one
process on 3 devices and resumed by 2 ranks, saved by 2 ranks and resumed by one process on
3 devices, each under another strategy, continue exactly like the uninterrupted run; a
corrupted newest checkpoint makes every rank fall back to the previous one."""
import json
import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "importer"))

from ckpt_model import batches, compile_  # noqa: E402
from harness import run_mpi  # noqa: E402
from parallel_ops import checkpoint  # noqa: E402
from taskrt import Machine  # noqa: E402

RANKS = 2
DATA = batches()


@pytest.fixture(scope="module")
def reference():
    """The uninterrupted run in one process (strategy A on 2 devices)."""
    t = compile_(Machine.local(2), "A")
    return [t.step(b) for b in DATA], checkpoint.state_tensors(t)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ckpt_mpi")
    in_dir = out / "from_one_process"
    one = compile_(Machine.local(3), "C")
    for b in DATA[:2]:
        one.step(b)
    checkpoint.save_to_dir(one, str(in_dir))
    rc, text = run_mpi(RANKS, [os.path.join(HERE, "mpi_run.py"), str(out), str(in_dir)], 300,
                       ROOT)
    assert rc == 0, text[-4000:]
    return out, text, [json.load(open(out / f"rank{r}.json")) for r in range(RANKS)]


def _close_state(got: dict, want: dict, where: str):
    assert set(got) == set(want), where
    for k, w in want.items():
        g = torch.tensor(got[k], dtype=w.dtype) if not isinstance(got[k], torch.Tensor) else got[k]
        assert torch.allclose(g, w, rtol=1e-10, atol=1e-13), f"{where}: {k}"


def test_two_ranks_run_like_one_process(run, reference):
    _, _, per_rank = run
    losses, final = reference
    for r, res in enumerate(per_rank):
        assert res["full"]["losses"] == pytest.approx(losses, rel=1e-12), f"rank {r}"
        _close_state(res["full"]["state"], final, f"full rank {r}")


def test_two_ranks_resume_a_one_process_checkpoint(run, reference):
    _, _, per_rank = run
    losses, final = reference
    for r, res in enumerate(per_rank):
        got = res["from_one_process"]
        assert got["losses"] == per_rank[0]["from_one_process"]["losses"]
        assert got["losses"] == pytest.approx(losses[2:], rel=1e-12), f"rank {r}"
        _close_state(got["state"], final, f"from_one_process rank {r}")


def test_one_process_resumes_a_two_rank_checkpoint(run, reference):
    out, _, _ = run
    losses, final = reference
    ckpt = checkpoint.read_file(checkpoint.latest(str(out / "saved")))
    assert ckpt.header["machine"]["ranks"] == 2 and len(ckpt.header["rng"]) == 2
    t = compile_(Machine.local(3), "D", seed=99)
    assert checkpoint.resume(t, str(out / "saved"))["model"]["step_count"] == 2
    assert [t.step(b) for b in DATA[2:]] == pytest.approx(losses[2:], rel=1e-12)
    _close_state(checkpoint.state_tensors(t), final, "one process from two ranks")


def test_every_rank_falls_back_from_a_corrupted_checkpoint(run, reference):
    _, text, per_rank = run
    losses, final = reference
    assert text.count("fails its checksum") == 1 and "step-00000002.ckpt" in text
    for r, res in enumerate(per_rank):
        got = res["fallback"]
        assert got["step"] == 1, f"rank {r}"
        assert got["losses"] == pytest.approx(losses[1:], rel=1e-12), f"rank {r}"
        _close_state(got["state"], final, f"fallback rank {r}")
