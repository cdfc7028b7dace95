"""One seeded search's process CPU: the probe behind the design notes' whole-search timings
(docs/design.md "Simulator speed"; older notes call it searchcmp.py).

    python tools/search_cpu.py inception 16 300     # app, GPUs, proposals (seed 0)

Builds the app's model at paper size for that many GPUs (strategy.costs.app_profile.load_app),
searches it on P100 nodes of 4 with the analytic cost model, seed 0, and prints one line: the
proposals made, process CPU (imports excluded, session builds included), the best predicted
iteration, the simulated count, CPU per proposal and the load average. Two trees compare by
running it with PYTHONPATH set to each, taking turns (old, new, new, old); equal best and
counts say the two searched alike. tools/replan_regions.py and tools/taskrt_share.py run the
same search with their timers installed. Run from the repository root with PYTHONPATH set.
"""
from __future__ import annotations

import os
import sys
import time


def seeded_search(app: str, gpus: int, proposals: int, seed: int = 0):
    """(search result, process CPU s) of the seeded search described above."""
    from strategy.costs import CostModel
    from strategy.costs.app_profile import load_app
    from strategy.machine_model import machine_model
    from strategy.search import search
    t = time.process_time()
    net = load_app(app, [], devices=gpus)
    result = search(net.model, machine_model(f"p100:{max(1, gpus // 4)}"), CostModel(),
                    proposals=proposals, optimizer=net.optimizer, seed=seed)
    return result, time.process_time() - t


def main(app: str, gpus: int, proposals: int) -> str:
    import strategy.search  # noqa: F401  (imports outside the timed part)
    result, cpu = seeded_search(app, gpus, proposals)
    return (f"{os.environ.get('PYTHONPATH', '?')} {app}@{gpus} {result.proposals} proposals "
            f"cpu {cpu:.1f} s best {result.predicted * 1e3:.4f} ms simulated {result.simulated} "
            f"ms/proposal {cpu / max(result.proposals, 1) * 1e3:.1f} "
            f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    args = sys.argv[1:] or ["inception", "16", "300"]
    print(main(args[0], int(args[1]), int(args[2])))
