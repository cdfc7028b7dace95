"""The full simulation runs with numpy's huge-page advice off (taskrt/smallpages.py: fresh
2 MiB pages zeroed pass after pass were ~1 s of system time of GPT-3 2.7B at 1,024 GPUs)
and leaves the setting as it found it; the prediction does not depend on it."""
import numpy as np
import pytest

from strategy.costs import CostModel
from strategy.simulator import NodeTimer, simulate
from taskrt import smallpages
from taskrt.smallpages import huge_pages, small_pages

from test_sim_classes import graph_of

pytestmark = pytest.mark.skipif(smallpages._set_madvise_hugepage is None,
                                reason="numpy has no huge-page switch")


@pytest.mark.parametrize("before", [True, False])
def test_simulate_runs_on_small_pages_and_restores_the_setting(before):
    graph, mm = graph_of("mlp", 3)
    seen = []

    class Watching(NodeTimer):              # (asked node by node, inside the simulation)
        def timing(self, node):
            seen.append(huge_pages())
            return super().timing(node)
    was = smallpages._set_madvise_hugepage(before)
    try:
        watched = simulate(graph, mm, CostModel(), Watching(mm, CostModel()))
        assert seen and not any(seen)
        assert huge_pages() is before
        with small_pages():
            with small_pages():
                assert huge_pages() is False
            assert huge_pages() is False
        assert huge_pages() is before
        # The same prediction with huge pages advised throughout.
        smallpages._set_madvise_hugepage(True)
        plain = smallpages._set_madvise_hugepage
        smallpages._set_madvise_hugepage = None       # small_pages: a no-op
        try:
            other = simulate(graph, mm, CostModel())
        finally:
            smallpages._set_madvise_hugepage = plain
        assert np.array_equal(watched.end, other.end) and watched.memory == other.memory
    finally:
        smallpages._set_madvise_hugepage(was)
