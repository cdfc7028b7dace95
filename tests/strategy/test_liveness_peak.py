"""strategy.memsweep.liveness_peak (the simulator's memory peak) against taskrt.liveness's
Liveness.peak (numpy, peak_bytes_of_users): the same dict, values and order, on random
temporaries and timelines full of ties (times from a few values, users that take no time,
a buffer's last users ending together), devices with persistent bytes only, temporaries
only or both, listed in any order; and the simulator's memory on a real graph. The
buffers' lifetimes the simulator takes instead of their uses (liveness.lifetimes,
Liveness.on_timeline) against the uses read one by one, and their peak against the
uses'."""
import os
import random
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "mpi"))

from models import cnn, cnn_strategies, lstm_model, lstm_strategies  # noqa: E402
from parallel_ops import SGD  # noqa: E402
from strategy.memsweep import liveness_peak  # noqa: E402
from strategy.simulator import memory_per_device  # noqa: E402
from taskrt import Machine  # noqa: E402
from taskrt.liveness import Liveness, lifetime_users, lifetimes  # noqa: E402

CASES = [(cnn, cnn_strategies, s) for s in ("data_parallel", "random")] + \
        [(lstm_model, lstm_strategies, s) for s in ("parameter", "random")]
IDS = [f"{b.__name__}-{s}" for b, _, s in CASES]


def random_liveness(rng: random.Random) -> tuple:
    num_dev = rng.randint(1, 6)
    temps = rng.randint(0, 40)
    nodes = rng.randint(1, 30)
    device = [rng.randrange(num_dev) for _ in range(temps)]
    nbytes = [rng.choice([0, 1, 7, 64, 1000, 2 ** 33]) for _ in range(temps)]
    use_buf, use_node = [], []
    for b in range(temps):                    # every temporary has users (Liveness's rule)
        for _ in range(rng.randint(1, 4)):
            use_buf.append(b)
            use_node.append(rng.randrange(nodes))
    order = list(range(len(use_buf)))
    rng.shuffle(order)                        # uses in no particular order, some repeated
    use_buf = [use_buf[k] for k in order]
    use_node = [use_node[k] for k in order]
    persistent = {d: rng.choice([0, 5, 10 ** 9]) for d in rng.sample(range(num_dev + 2),
                                                                  rng.randint(0, num_dev))}
    times = [0.0, 1.0, 2.0, 2.5] if rng.random() < 0.5 else [0, 1, 2]
    start = [rng.choice(times) for _ in range(nodes)]
    end = [s if rng.random() < 0.3 else s + rng.choice([0.5, 1.0]) for s in start]
    live = Liveness(None, device, nbytes, use_buf, use_node, persistent, set())
    return live, start, end


@pytest.mark.parametrize("seed", range(4))
def test_liveness_peak_is_liveness_peak(seed):
    rng = random.Random(seed)
    for case in range(500):
        live, start, end = random_liveness(rng)
        want = live.peak(start, end)
        got = liveness_peak(live, np.asarray(start, dtype=np.float64), end)
        assert list(got.items()) == list(want.items()), (seed, case)


@pytest.mark.parametrize("build,strategies,name", CASES, ids=IDS)
def test_simulated_memory_is_liveness_peak(build, strategies, name):
    """memory_per_device (liveness_peak) on compiled graphs equals Liveness.peak, in id
    order and on timelines where nodes overlap and tie, with the results kept or all."""
    model, _ = build()
    graph = model.compile(Machine.local(4), strategies(4)[name], SGD(lr=0.1)).graph
    n = len(graph.nodes)
    rng = random.Random(n)
    for start in (list(range(n)), [rng.choice([0.0, 1.0, 2.0, 3.0]) for _ in range(n)]):
        end = [s + (1 if i % 3 else 0) for i, s in enumerate(start)]
        for keep in (None, "all"):
            want = Liveness.of(graph, keep).peak(start, end)
            got = memory_per_device(graph, start, end, keep=keep)
            assert list(got.items()) == list(want.items()), keep


@pytest.mark.parametrize("seed", range(4))
def test_lifetimes_stand_for_the_uses(seed):
    """lifetimes (a buffer's earliest start, latest end and whether a user ending last takes
    no time) equal the uses read one by one, the uses in pieces of any size with entries -1
    (no buffer) among them and buffers nobody uses; the pseudo-users of lifetime_users have
    the uses' peak (liveness_peak's compiled sweep, its own reading of the uses, and
    Liveness.peak)."""
    rng = random.Random(seed)
    for case in range(300):
        live, start, end = random_liveness(rng)
        n = len(live.nbytes) + rng.randint(0, 2)          # (the last ones used by nobody)
        buf, node = live.use_buf.tolist(), live.use_node.tolist()
        for _ in range(rng.randint(0, 3)):
            k = rng.randint(0, len(buf))
            buf.insert(k, -1)
            node.insert(k, rng.randrange(len(start)))
        cuts = sorted(rng.randint(0, len(buf)) for _ in range(rng.randint(0, 3)))
        pieces = [(np.array(buf[a:b], dtype=np.int64), np.array(node[a:b], dtype=np.int64))
                  for a, b in zip([0] + cuts, cuts + [len(buf)])]
        if case % 3 == 0:       # some nodes ending before they start, or at NaN: used still
            s, e = list(start), list(np.asarray(end, dtype=np.float64))
            for i in rng.sample(range(len(s)), rng.randint(1, len(s))):
                s[i], e[i] = (e[i] + 1, s[i]) if rng.random() < 0.7 else (s[i], float("nan"))
            with np.errstate(invalid="ignore"):         # (NaN in the maxima)
                got = lifetimes(pieces, n, s, e)[0]
            assert got.tolist() == [b in buf for b in range(n)], (seed, case)
        used, born, dies, late = lifetimes(pieces, n, start, end)
        for b in range(n):
            users = [node[k] for k in range(len(buf)) if buf[k] == b]
            assert used[b] == bool(users), (seed, case, b)
            if users:
                last = max(end[i] for i in users)
                assert born[b] == min(start[i] for i in users) and dies[b] == last
                assert late[b] == any(end[i] == last and start[i] == end[i] for i in users)
        n = len(live.nbytes)
        use_buf, use_node, s, e = lifetime_users(born[:n], dies[:n], late[:n])
        pseudo = Liveness(None, live.device, live.nbytes, use_buf, use_node, live.persistent,
                          set())
        want = liveness_peak(live, np.asarray(start, dtype=np.float64), end)
        assert list(liveness_peak(pseudo, s, e).items()) == list(want.items()), (seed, case)
        assert list(pseudo.peak(s, e).items()) == list(live.peak(start, end).items())
