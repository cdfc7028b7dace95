"""Imported models trained under mixed strategies over `mpirun -np 2` equal plain PyTorch;
every rank writes the same trained weights back into its module (one mpirun for all)."""
import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

from harness import assert_state_close, mpi_results, torch_steps  # noqa: E402
from nets import NETS, gpt2  # noqa: E402
from parallel_ops import SGD  # noqa: E402

RANKS = 2


@pytest.fixture(scope="module")
def per_rank(tmp_path_factory):
    return mpi_results(tmp_path_factory, RANKS, [], 240, ROOT)


def _build(name):
    if name == "gpt2":
        built = gpt2()
        if built is None:
            pytest.skip("transformers is not installed")
        return built
    return NETS[name][0]()


@pytest.mark.parametrize("name", list(NETS) + ["gpt2"])
def test_two_ranks_equal_pytorch(per_rank, name):
    module, inputs, labels = _build(name)
    want, want_state = torch_steps(module, inputs, labels, SGD(lr=0.1, momentum=0.9), 2)
    for r, res in enumerate(per_rank):
        got = res[name]
        assert got["losses"] == per_rank[0][name]["losses"], f"rank {r}"
        assert got["losses"] == pytest.approx(want, rel=1e-10), f"rank {r}"
        state = {k: torch.tensor(v, dtype=want_state[k].dtype) for k, v in got["state"].items()}
        assert_state_close(state, want_state, where=f"{name} rank {r}")
