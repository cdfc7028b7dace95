"""strategy/memsweep.py orders a sweep's events by packed keys sorted as values (_pack,
_unpack): the order must be numpy's stable argsort of the times exactly, also for times
that share their leading bits (the low bits replaced by the index), ties, zeros and -0.0;
and sweep_peak must give the same peaks with it on and off."""
from __future__ import annotations

import numpy as np
import pytest

from strategy import memsweep
from strategy.memsweep import Scratch, sweep_peak


def packed_order(times: np.ndarray) -> np.ndarray:
    _, _, pack, unpack = memsweep._kernels()
    n = len(times)
    shift = max(1, (n - 1).bit_length())
    keys = np.empty(n, dtype=np.int64)
    pack(times.view(np.int64), shift, keys)
    keys.sort()
    order = np.empty(n, dtype=np.int64)
    unpack(times, keys, shift, order)
    return order


def random_times(rng, n: int) -> np.ndarray:
    """Times in clusters that agree in all but their last bits, exact ties, zeros and -0.0,
    in random order."""
    kind = rng.integers(0, 4)
    if kind == 0:                                   # a few values: many ties
        t = rng.choice(rng.random(5) * 1e-3, size=n)
    elif kind == 1:                                 # near-equal: only low bits differ
        t = 1.5e-3 + rng.integers(0, 1 << 20, size=n) * np.spacing(1.5e-3)
    elif kind == 2:
        t = rng.random(n) * rng.choice([1e-6, 1.0, 1e3])
    else:
        t = np.round(rng.random(n) * 40) * 1e-4
    t = np.where(rng.random(n) < 0.05, 0.0, t)
    t = np.where((t == 0) & (rng.random(n) < 0.5), -0.0, t)
    return np.ascontiguousarray(t, dtype=np.float64)


@pytest.mark.parametrize("seed", range(6))
def test_packed_order_is_the_stable_argsort(seed):
    rng = np.random.default_rng(seed)
    for _ in range(40):
        n = int(rng.choice([1, 2, 3, 17, 1000, 70000]))
        times = random_times(rng, n)
        got = packed_order(times)
        assert np.array_equal(got, np.argsort(times, kind="stable"))


@pytest.mark.parametrize("seed", [0, 1])
def test_sweep_peaks_equal_with_and_without_the_packed_sort(seed):
    """sweep_peak on random uses whose node times share their leading bits."""
    rng = np.random.default_rng(seed)
    nb, nodes, devices = 300, 400, 4
    for _ in range(30):
        sizes = rng.choice([8, 4096, 10 ** 6], size=nb).astype(np.int64)
        dev = rng.integers(0, devices, size=nb).astype(np.int64)
        region = rng.integers(0, 5, size=nb).astype(np.int64)
        kept = rng.random(5) < 0.3
        staging, state = rng.random(nb) < 0.2, rng.random(nb) < 0.1
        start = random_times(rng, nodes)
        start = np.abs(start)
        end = start + np.where(rng.random(nodes) < 0.3, 0.0,
                               rng.integers(0, 8, size=nodes) * np.spacing(start + 1e-9))
        users_node = rng.integers(0, nodes, size=3 * nb).astype(np.int64)
        users_buf = rng.integers(0, nb, size=3 * nb).astype(np.int64)
        args = (users_buf, users_node, start, end, sizes, dev, region, kept, staging, state,
                4096)
        per, count = np.zeros(devices, dtype=np.int64), np.zeros(devices, dtype=np.int64)
        try:
            memsweep.PACKED_SORT = False
            want = sweep_peak(*args, per.copy(), count.copy(), Scratch())
        finally:
            memsweep.PACKED_SORT = True
        assert sweep_peak(*args, per.copy(), count.copy(), Scratch()) == want
