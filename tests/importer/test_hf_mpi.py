"""HF transformers models imported as users call them train over `mpirun -np 2` under data
parallel and two model-parallel strategies equal to eager PyTorch on their own loss; every
rank writes the same trained weights back into its module (one mpirun for all).
Tolerances as in test_hf_models.py (float64; GPT-2's and Llama's loss is float32)."""
import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

from harness import assert_state_close, mpi_results  # noqa: E402
from hf_models import CASES_MPI, build_case, transformers, torch_steps  # noqa: E402
from parallel_ops import SGD  # noqa: E402

RANKS = 2
TOL = {"bert": 1e-9}          # 1e-6 for the others: their loss is float32
pytestmark = pytest.mark.skipif(transformers is None, reason="transformers is not installed "
                                "(pip install -e '.[test]')")


@pytest.fixture(scope="module")
def per_rank(tmp_path_factory):
    return mpi_results(tmp_path_factory, RANKS, ["hf"], 400, ROOT)


@pytest.mark.parametrize("name,attn,strategy", CASES_MPI, ids=["-".join(c) for c in CASES_MPI])
def test_two_ranks_equal_eager(per_rank, name, attn, strategy):
    module, inputs, _ = build_case(name, attn)
    want, want_state = torch_steps(module, inputs, SGD(lr=0.1, momentum=0.9), 2)
    key, tol = f"{name}-{attn}-{strategy}", TOL.get(name, 1e-6)
    for r, res in enumerate(per_rank):
        got = res[key]
        assert got["losses"] == per_rank[0][key]["losses"], f"rank {r}"
        assert got["losses"] == pytest.approx(want, rel=tol), f"rank {r}"
        state = {k: torch.tensor(v, dtype=want_state[k].dtype) for k, v in got["state"].items()}
        assert_state_close(state, want_state, rtol=tol, atol=tol * 1e-2,
                           where=f"{key} rank {r}")
