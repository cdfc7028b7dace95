"""Delta simulation equals full simulation on a GPT with every block recomputed: a change of a
recomputed operator replaces its recompute launches too (they are part of its OpLaunches)."""
import argparse
import warnings

from apps.gpt import build
from test_delta import check_delta_equals_full

warnings.simplefilter("ignore")       # analytic-cost fallback warnings


def test_delta_equals_full_with_recompute():
    a = argparse.Namespace(small=True, config=None, seed=0, dtype="float32", batch_size=8,
                           vocab=None, width=None, heads=None, layers=None, seq_len=None,
                           recompute="full")
    model = build(a).model
    assert model.recompute
    check_delta_equals_full(model, changes=4, seed=3)
