"""The --small GPT under `mpirun -np 2` (tests/apps/mpi_gpt.py): Megatron's strategy (t=2) with
full activation recomputation, and a strategy searched in the same command, train like one
device in float64 (losses and updated weights to 1e-9)."""
from __future__ import annotations

import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from mpi_launch import run_mpi  # noqa: E402

from apps.common import run  # noqa: E402
from apps.gpt import APP  # noqa: E402
from strategy import files  # noqa: E402
from strategy.experts import megatron  # noqa: E402
from taskrt import Machine  # noqa: E402

ARGV = ["--small", "--batch-size", "8", "--iterations", "2", "--warmup", "0", "--dtype",
        "float64", "--quiet"]


@pytest.fixture(scope="module")
def mpi_dir(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("gpt_mpi"))
    net = APP.build_from_flags(ARGV, 2)
    path = os.path.join(out, "megatron.json")
    files.save(path, megatron(net.model, 2, 2, tensor_parallel=2), net.model, Machine.local(2))
    rc, log, _ = run_mpi(2, [os.path.join(HERE, "mpi_gpt.py"), out, path], timeout=600)
    assert rc == 0, log[-3000:]
    return out


@pytest.fixture(scope="module")
def one_device():
    res = run(APP, ARGV, out=None)
    return res.losses, {k: v.clone() for k, v in res.trainer.weights().items()}


@pytest.mark.parametrize("case", ["megatron", "searched"])
def test_gpt_under_mpirun_trains_like_one_device(mpi_dir, one_device, case):
    got = torch.load(os.path.join(mpi_dir, f"gpt-{case}.pt"), weights_only=True)
    losses, weights = one_device
    assert got["losses"] == pytest.approx(losses, rel=1e-9, abs=1e-9)
    for name, w in weights.items():
        torch.testing.assert_close(got["weights"][name], w, rtol=1e-9, atol=1e-9,
                                   msg=f"{case}: weight {name}")
    if case == "megatron":        # every block recomputed
        assert "h0/attn" in got["recompute"] and "h1/add_2" in got["recompute"]
