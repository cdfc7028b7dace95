"""The vision models of test_import_vision.py trained over `mpirun -np 2` under data
parallel and two model-parallel strategies equal eager PyTorch (float64, 1e-9); every rank
writes the same trained weights back into its module (one mpirun for all)."""
import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

from harness import assert_state_close, mpi_results, torch_steps  # noqa: E402
from vision_nets import MODELS, SOURCES, STRATEGIES, TIMM_SKIP, build  # noqa: E402
from parallel_ops import SGD  # noqa: E402

RANKS = 2


@pytest.fixture(scope="module")
def per_rank(tmp_path_factory):
    return mpi_results(tmp_path_factory, RANKS, ["vision"], 900, ROOT)


CASES = [(m, s) for m in MODELS for s in SOURCES]


@pytest.mark.parametrize("name,source", CASES, ids=["-".join(c) for c in CASES])
def test_two_ranks_equal_pytorch(per_rank, name, source):
    if source == "timm" and TIMM_SKIP:
        pytest.skip(TIMM_SKIP)
    module, inputs, labels = build(name, source)
    want, want_state = torch_steps(module, inputs, labels, SGD(lr=0.05, momentum=0.9), 2)
    for kind in STRATEGIES:
        key = f"{source}/{name}/{kind}"
        for r, res in enumerate(per_rank):
            got = res[key]
            assert got["losses"] == per_rank[0][key]["losses"], f"{key} rank {r}"
            assert got["losses"] == pytest.approx(want, rel=1e-9), f"{key} rank {r}"
            state = {k: torch.tensor(v, dtype=want_state[k].dtype)
                     for k, v in got["state"].items()}
            assert_state_close(state, want_state, rtol=1e-9, atol=1e-9, where=f"{key} rank {r}")
