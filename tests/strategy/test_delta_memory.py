"""strategy.delta_memory.BufferTable: the peak after any sequence of region updates and kept
sets equals the peak computed from scratch (taskrt.liveness's model: persistent buffers of
kept regions or under the small-buffer size, temporaries from first to last user)."""
import random

import numpy as np
import pytest

from strategy.delta_memory import BufferTable
from strategy.memsweep import Scratch, sweep_peak
from taskrt.liveness import INSTANCE, PARTIAL, STAGING, STATE, is_small, peak_bytes_of_users

DEVICES = 4
REGIONS = [f"r{k}" for k in range(6)]


class _Copy:
    """Stands for the copy node a staging key names (only its identity is used)."""


def random_uses(rng, buffers: int, nodes: int, most: int) -> tuple:
    """Random uses (buffer, node) of `buffers` buffers by `nodes` nodes (1 to most - 1 of
    them), the nodes' start and end times, and per device persistent bytes and counts."""
    uses = int(rng.integers(1, most))
    users_buf = rng.integers(0, buffers, size=uses).astype(np.int64)
    users_node = rng.integers(0, nodes, size=uses).astype(np.int64)
    start = rng.choice([0.0, 1.0, 2.0, 3.0], size=nodes)
    end = start + rng.choice([0.0, 0.5, 1.0], size=nodes)
    per = rng.choice([0, 100], size=DEVICES).astype(np.int64)
    return users_buf, users_node, start, end, per, (per > 0).astype(np.int64)


def from_scratch(table, regions, kept, users_buf, users_node, start, end):
    """The peak of the table's buffers computed over every buffer, as delta.py did before
    the table kept sums."""
    n = len(table)
    sizes = np.array(table.own_bytes.items, dtype=np.int64)
    current = np.zeros(n, dtype=bool)
    for name, (ids, _, nbytes) in regions.items():
        sizes[ids] = nbytes
        current[ids] = True
    names = {i: k[1] for k, i in table.ids.items()}
    kinds = {i: k[0] for k, i in table.ids.items()}
    dev = np.array(table.dev.items, dtype=np.int64)
    persistent_of = np.array([(names[i] in kept or bool(is_small(sizes[i])))
                              and kinds[i] != STATE for i in range(n)], dtype=bool)
    used = set(users_buf.tolist())
    persistent: dict[int, int] = {}
    for i in range(n):
        if persistent_of[i] and (current[i] or (kinds[i] == STAGING and i in used)):
            persistent[int(dev[i])] = persistent.get(int(dev[i]), 0) + int(sizes[i])
    temp = ~persistent_of[users_buf]
    return peak_bytes_of_users(users_buf[temp], users_node[temp], dev, sizes, start, end,
                               persistent)


@pytest.mark.parametrize("seed", [5, 6, 7, 8])
def test_peak_equals_from_scratch_after_random_updates(seed):
    rng = random.Random(seed)
    table = BufferTable(DEVICES)
    copies = [_Copy() for _ in range(5)]
    own = [table.id((STAGING, rng.choice(REGIONS), rng.randrange(DEVICES), c),
                    rng.choice([0, 100, 10 ** 6])) for c in copies]
    own += [table.id((STATE, "f@state", d, (0, 10 ** 6)), 10 ** 6) for d in range(2)]
    current: dict[str, tuple] = {}
    kept_seen = set()
    for step in range(60):
        for name in rng.sample(REGIONS, rng.randrange(1, 3)):
            if rng.random() < 0.2:
                entry = None
            else:
                devs = rng.sample(range(DEVICES), rng.randrange(1, DEVICES + 1))
                keys = [(rng.choice([INSTANCE, PARTIAL]), name, d, None) for d in devs]
                keys = list(dict.fromkeys(keys))
                entry = (np.array([table.id(k, 0) for k in keys], dtype=np.int64),
                         np.array([k[2] for k in keys], dtype=np.int64),
                         np.array([rng.choice([8, 4096, 10 ** 6]) for _ in keys],
                                  dtype=np.int64))
            table.set_region(name, entry, initial=False)
            if entry is None:
                current.pop(name, None)
            else:
                current[name] = entry
        kept = set(rng.sample(REGIONS, rng.randrange(0, 3)))
        kept_seen.add(frozenset(kept))
        candidates = own + [int(i) for e in current.values() for i in e[0]]
        nodes = 12
        users_buf = np.array([rng.choice(candidates) for _ in range(30)], dtype=np.int64)
        users_node = np.array([rng.randrange(nodes) for _ in range(30)], dtype=np.int64)
        start = np.array([rng.choice([0.0, 1.0, 2.0, 3.0]) for _ in range(nodes)])
        end = start + np.array([rng.choice([0.0, 0.5, 1.0]) for _ in range(nodes)])
        got = table.peak(kept, users_buf, users_node, start, end)
        want = from_scratch(table, current, kept, users_buf, users_node, start, end)
        assert got == want, f"step {step}"
        # The same uses given in node order by their count per node (delta.py's form).
        order = np.argsort(users_node, kind="stable")
        counts = np.bincount(users_node, minlength=nodes)
        assert table.peak(kept, users_buf[order], None, start, end,
                          user_counts=counts) == want, f"step {step}, by counts"
    assert len(kept_seen) > 10          # the kept set changed many times


@pytest.mark.parametrize("seed", [0, 1])
def test_sweep_with_kept_scratch_equals_a_fresh_one(seed):
    """A sweep sets up only the buffers it uses in a Scratch kept between sweeps: entries
    left by earlier sweeps (other buffers, other times, a smaller table) change nothing."""
    rng = np.random.default_rng(seed)
    scratch = Scratch()
    n = 20
    for step in range(80):
        n += int(rng.integers(0, 8))           # the table grows between sweeps
        sizes = rng.choice([0, 8, 4096, 10 ** 6], size=n).astype(np.int64)
        dev = rng.integers(0, DEVICES, size=n).astype(np.int64)
        region = rng.integers(0, 3, size=n).astype(np.int64)
        kept = rng.random(3) < 0.3
        staging, state = rng.random(n) < 0.3, rng.random(n) < 0.1
        users_buf, users_node, start, end, per, count = random_uses(rng, n, 10, 40)
        args = (users_buf, users_node, start, end, sizes, dev, region, kept, staging, state,
                4096)
        got = sweep_peak(*args, per.copy(), count.copy(), scratch)
        assert got == sweep_peak(*args, per.copy(), count.copy(), Scratch()), f"step {step}"


def reference_sweep(users_buf, users_node, start, end, sizes, dev, region, kept, staging,
                    state, threshold, per_bytes, per_count):
    """sweep_peak's model written out: a buffer of a kept region or under `threshold`
    persists unless it is saved state (always a temporary); a persisting staging buffer in
    use adds its bytes to its device once; the rest are peak_bytes_of_users' temporaries."""
    keep = kept[region] | (sizes < threshold)
    persistent = {int(d): int(per_bytes[d]) for d in np.flatnonzero(per_count)}
    for b in sorted(set(users_buf.tolist())):
        if keep[b] and staging[b]:
            persistent[int(dev[b])] = persistent.get(int(dev[b]), 0) + int(sizes[b])
    temp = ~(keep & ~state)[users_buf]
    return peak_bytes_of_users(users_buf[temp], users_node[temp], dev, sizes, start, end,
                               persistent)


@pytest.mark.parametrize("seed", [2, 3, 4])
def test_sweep_equals_its_model_written_out(seed):
    """sweep_peak (one Scratch for all sweeps, uses in any order or by count per node)
    against reference_sweep on random buffers: kept regions, small buffers, staging
    buffers and saved state, small saved state among them (a temporary all the same), and
    in some sweeps buffers both staging and state (the kernel's rule for any flags)."""
    rng = np.random.default_rng(seed)
    scratch = Scratch()
    n = 30
    for step in range(120):
        n += int(rng.integers(0, 4))
        sizes = rng.choice([0, 8, 4000, 4096, 10 ** 6], size=n).astype(np.int64)
        dev = rng.integers(0, DEVICES, size=n).astype(np.int64)
        region = rng.integers(0, 4, size=n).astype(np.int64)
        kept = rng.random(4) < 0.4
        kind = rng.integers(0, 3, size=n)         # instance or partial, staging, state
        staging, state = kind == 1, kind == 2
        if step % 4 == 3:
            staging = staging | (state & (rng.random(n) < 0.5))
        users_buf, users_node, start, end, per, count = random_uses(rng, n, 12, 60)
        args = (sizes, dev, region, kept, staging, state, 4096)
        want = reference_sweep(users_buf, users_node, start, end, *args, per, count)
        got = sweep_peak(users_buf, users_node, start, end, *args, per.copy(), count.copy(),
                         scratch)
        assert got == want, f"step {step}"
        order = np.argsort(users_node, kind="stable")
        got = sweep_peak(users_buf[order], None, start, end, *args, per.copy(), count.copy(),
                         scratch, counts=np.bincount(users_node, minlength=len(start)))
        assert got == want, f"step {step}, by counts"


@pytest.mark.parametrize("shift", [-2.0, -0.0])
def test_sweep_sorts_negative_and_signed_zero_times(shift):
    """sweep_peak sorts times that are not negative as their bits: times below zero (a
    timeline shifted back) take the float sort, and -0.0 (as bits, below every other
    time) is a zero all the same; both against the model written out."""
    rng = np.random.default_rng(7)
    n, signed = 40, 0
    for step in range(60):
        sizes = rng.choice([0, 8, 4096, 10 ** 6], size=n).astype(np.int64)
        dev = rng.integers(0, DEVICES, size=n).astype(np.int64)
        region = rng.integers(0, 3, size=n).astype(np.int64)
        staging, state = rng.random(n) < 0.2, rng.random(n) < 0.1
        users_buf, users_node, start, end, per, count = random_uses(rng, n, 12, 60)
        if shift:
            start, end = start + shift, end + shift
        else:                                   # some zeros are -0.0
            start = np.where((start == 0) & (rng.random(len(start)) < 0.5), -0.0, start)
            end = np.where((end == 0) & (rng.random(len(end)) < 0.5), -0.0, end)
            signed += int(np.signbit(start).sum() + np.signbit(end).sum())
        args = (sizes, dev, region, np.zeros(3, dtype=bool), staging, state, 4096)
        want = reference_sweep(users_buf, users_node, start, end, *args, per, count)
        got = sweep_peak(users_buf, users_node, start, end, *args, per.copy(), count.copy())
        assert got == want, f"step {step}"
    assert signed > 50 or shift
