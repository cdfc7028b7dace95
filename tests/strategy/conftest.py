"""Fixtures shared by the search tests: a small MLP on a 4-GPU P100 node model."""
import pytest

from parallel_ops import Model
from strategy.costs import CostModel
from strategy.machines import machine_model


@pytest.fixture(scope="module")
def setting():
    """(model, machine model, cost model): fc1 (256 -> 512), ReLU, fc2 (512 -> 1024), loss."""
    mm = machine_model("p100:1")
    m = Model("mlp", seed=0)
    x = m.input("x", (64, 256))
    y = m.input("y", (64,), dtype="int64")
    h = m.relu(m.linear(x, 512, name="fc1"), name="relu1")
    m.softmax_cross_entropy(m.linear(h, 1024, name="fc2"), y, name="loss")
    return m, mm, CostModel()
