"""The custom-operator example of docs/custom_ops.md, defined outside the package, works like
a built-in operator under every legal configuration."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "examples"))

import scale_shift  # noqa: E402,F401  (attaches model.scale_shift)
from oracle import assert_matches, legal_configs, random_feeds  # noqa: E402
from parallel_ops import Model, ParallelConfig  # noqa: E402


def build():
    m = Model("custom", seed=0, dtype="float64")
    x = m.input("x", (6, 5), requires_grad=True)
    y = m.input("y", (6,), dtype="int64")
    h = m.linear(x, 4, name="fc")
    h = m.scale_shift(h, name="ss")
    m.softmax_cross_entropy(m.linear(h, 3, name="out"), y, name="loss")
    return m, random_feeds(m, 0, 3)


@pytest.mark.parametrize("cfg", legal_configs(build()[0].op("ss"), 4), ids=str)
def test_custom_op_every_config(cfg):
    m, feeds = build()
    assert_matches(m, feeds, {"ss": cfg, "fc": ParallelConfig.of([1, 2], o=2)})
