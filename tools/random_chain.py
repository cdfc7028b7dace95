"""One random start's chain alone, and how far it gets into memory (docs/design.md "Search",
memory moves).

    python tools/random_chain.py inception 16 300      # app, GPUs, proposals [seed]
    python tools/random_chain.py inception 16 60s 1    # or a wall-clock budget

Builds the app at paper size for that many GPUs (strategy.costs.app_profile.load_app, P100
nodes of 4, analytic costs), draws the search's first random start for the seed, sets the
temperature from data parallelism's time as a search that ran it first would, and runs that
start's chain alone (no other candidates, no restarts). Prints the bytes over capacity summed
over the devices at the start and the end, the proposals, accepted steps, the largest
device's excess, the graph's nodes at the end and the process CPU. Two trees compare by
running it with PYTHONPATH set to each, taking turns. Run from the repository root.
"""
from __future__ import annotations

import sys
import time


def main(app: str, gpus: int, budget: str, seed: int = 0) -> str:
    from strategy.costs import CostModel
    from strategy.costs.app_profile import load_app
    from strategy.machine_model import machine_model
    from strategy.search import Search
    from strategy.search_budget import Budget
    secs, proposals = (float(budget[:-1]), None) if budget.endswith("s") else (None, int(budget))
    net = load_app(app, [], devices=gpus)
    search = Search(net.model, machine_model(f"p100:{max(1, gpus // 4)}"), CostModel(),
                    optimizer=net.optimizer, seed=seed, restarts=False)
    ops = search.space.searchable()
    start = {op.name: search.space.random_config(op, search.rng) for op in ops}
    t = time.process_time()
    search.beta = len(ops) / (search.temperature * search._session(None).result.span)
    over = []                       # bytes over capacity of the start, as built
    session_of = search._session

    def session(*args, **kw):
        got = session_of(*args, **kw)
        over.append(sum(got.result.over_capacity.values()))
        return got
    search._session = session
    run = search._chain("random 0", start, Budget(secs, proposals), 1)
    cpu = time.process_time() - t
    end = search.last_session.result
    return (f"{app}@{gpus} seed {seed}: over capacity {over[0] / 1e9:.1f}"
            f" -> {sum(end.over_capacity.values()) / 1e9:.1f} GB (all devices); "
            f"{run.proposals} proposals, {run.accepted} accepted; largest device "
            f"{run.over_bytes / 1e9:.1f} GB over; {search.last_session._live_nodes} nodes; "
            f"cpu {cpu:.1f} s")


if __name__ == "__main__":
    a = sys.argv[1:] or ["inception", "16", "300"]
    if not 3 <= len(a) <= 4 or not a[1].isdigit() or not a[2].rstrip("s").isdigit() or \
            (len(a) == 4 and not a[3].isdigit()):
        sys.exit("usage: python tools/random_chain.py APP GPUS PROPOSALS|SECONDSs [SEED], "
                 "e.g. inception 16 300 or inception 16 60s 1")
    print(main(a[0], int(a[1]), a[2], int(a[3]) if len(a) > 3 else 0))
