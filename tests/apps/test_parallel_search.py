"""--search under mpirun: every rank searches its own chains (seed --seed + rank, its share
of --search-proposals) and the best strategy found is every rank's (apps/hooks.py);
--search-ranks 1 searches on rank 0 alone."""
from __future__ import annotations

import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from mpi_launch import run_mpi  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
ARGV = [os.path.join(ROOT, "apps", "rnnlm.py"), "--small", "--simulate", "--search", "600",
        "--search-proposals", "24", "--quiet"]


def test_every_rank_searches_and_the_best_wins():
    rc, log, _ = run_mpi(2, ARGV, timeout=600)
    assert rc == 0, log[-3000:]
    m = re.search(r"searched on 2 ranks \(seeds 0-1\), 24 proposals in all; best per rank: "
                  r"([\d.]+) ms \(rank 0, 12 proposals\), ([\d.]+) ms \(rank 1, 12 "
                  r"proposals\); rank (\d)'s is the best:\nsearched 12 proposals", log)
    assert m, log[-3000:]
    times = [float(m.group(1)), float(m.group(2))]
    assert int(m.group(3)) == min((t, r) for r, t in enumerate(times))[1]
    best = re.search(r"best found\s+([\d.]+) ms", log)
    assert best and float(best.group(1)) == min(times), log[-3000:]
    assert log.count("Predicted:") == 1         # rank 0 reports, once


def test_search_ranks_1_searches_on_rank_0_alone():
    rc, log, _ = run_mpi(2, ARGV + ["--search-ranks", "1"], timeout=600)
    assert rc == 0, log[-3000:]
    assert "searched on 2 ranks" not in log and "searched 24 proposals" in log, log[-3000:]
