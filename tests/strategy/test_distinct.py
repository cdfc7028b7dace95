"""strategy/timearrays.py distinct(), the simulator's np.unique of copy (src, dst) pairs and
of (task class, device spec) pairs by a table: equal to np.unique(keys, return_inverse=True)
on random keys, through the table and through np.unique (tables too large, keys out of
range or negative)."""
import numpy as np
import pytest

from strategy import timearrays
from strategy.timearrays import distinct


@pytest.mark.parametrize("seed", range(30))
def test_distinct_is_np_unique(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.choice([0, 1, 5, 100, 5000]))
    size = int(rng.choice([1, 7, 64, 1000, 50_000]))
    keys = rng.integers(0, size, n)
    if seed % 5 == 4 and n:                     # a few values, many times
        keys = rng.choice(rng.integers(0, size, 3), n)
    cases = [(keys, size)]
    if n:
        cases += [(keys, size + 3), (np.concatenate([keys, [size]]), size),
                  (np.concatenate([keys, [-1]]), size)]
    for k, s in cases:
        values, inverse = distinct(k, s)
        want, want_inverse = np.unique(k, return_inverse=True)
        assert values.tolist() == want.tolist()
        assert inverse.tolist() == want_inverse.reshape(-1).tolist()
        assert values.dtype == want.dtype and inverse.dtype == np.int64


def test_the_table_is_used_where_it_fits(monkeypatch):
    """(So that test_distinct_is_np_unique checks the table, not np.unique only.)"""
    calls = []
    unique = np.unique
    monkeypatch.setattr(timearrays.np, "unique", lambda *a, **k: calls.append(1) or
                        unique(*a, **k))
    distinct(np.array([3, 1, 3, 0]), 8)
    assert not calls
    distinct(np.array([3, 1, 3, 0]), timearrays._DENSE_MAX + 1)
    assert calls
