"""TaskClasses.of's Red+ patterns (taskrt/taskclasses.py `_patterns`) equal the loop over
the tasks asking class_key of each, on runs of one launch's tasks whose Red+ targets are
remade with drawn flags: one (partial, accumulate) for every task of a column (taken
without a tuple per target), one flag varying, one or two pieces per requirement, some
tasks without a Red+, one targets tuple shared by every task of a run (an identity check),
a few, or a tuple each, the parts' shapes alike or varying (a part one row short); each launch in two runs whose
flags are drawn apart (a key made wrong for a whole run shows as two runs' classes
merged or split)."""
import random

import pytest

from taskrt.geometry import Rect
from taskrt.privilege import RegionRequirement
from taskrt.taskgraph import TASK, ReduceTarget, TaskNode

from test_sim_classes import graph_of
from test_task_class_runs import assert_same

# How a run's Red+ flags are drawn: per column, one pair for all tasks, or per task one
# flag (or both) drawn.
MODES = ["one", "partial varies", "accumulate varies", "both vary", "pieces vary",
         "some without"]


def _targets(rng, template, mode: str, flags: dict):
    """template's targets remade: per Red+ requirement its pieces with drawn flags."""
    out = []
    for k, t in enumerate(template):
        if t is None:
            out.append(None)
            continue
        if mode == "some without" and rng.random() < 0.3:
            out.append(None)
            continue
        partial, accumulate = flags.setdefault(k, (rng.random() < 0.5, rng.random() < 0.5))
        if mode in ("partial varies", "both vary"):
            partial = rng.random() < 0.5
        if mode in ("accumulate varies", "both vary"):
            accumulate = rng.random() < 0.5
        pieces = flags.setdefault(("m", k), rng.choice((1, 2)))
        if mode == "pieces vary":
            pieces = rng.choice((1, 2))
        out.append(tuple(ReduceTarget(t[0].piece, partial, accumulate)
                         for _ in range(pieces)))
    return tuple(out)


def _shrunk(task) -> tuple:
    """task's requirements, the first's part one row shorter where it has two or more
    (shapes varying within a run)."""
    first, *rest = task.requirements
    lo, hi = first.rect.lo, first.rect.hi
    if hi[0] - lo[0] < 2:
        return task.requirements
    rect = Rect(lo, (hi[0] - 1,) + tuple(hi[1:]))
    return (RegionRequirement(first.region, rect, first.privilege), *rest)


@pytest.mark.parametrize("name", ["gpt-t4", "gpt-t2", "transformer"])
@pytest.mark.parametrize("mode", MODES)
def test_red_plus_patterns_per_run_equal_classes_per_task(name, mode):
    graph, _ = graph_of(name, -1)
    tasks = [n for n in graph.nodes if n.kind is TASK]
    by_launch: dict = {}
    for t in tasks:
        if any(x is not None for x in t.targets):
            by_launch.setdefault(id(t.launch), []).append(t)
    runs = list(by_launch.values())
    assert runs                                          # (Red+ tasks to draw from)
    rng = random.Random(f"{name}/{mode}")
    for _ in range(30):
        made = []
        two = rng.sample(runs, min(2, len(runs)))
        for ts in two + two:        # each launch's tasks in two runs, flags drawn anew
            n = len(ts[0].requirements)
            ts = [t for t in ts if len(t.requirements) == n]
            flags: dict = {}
            # targets tuples: one shared by the run's tasks, or a few, or one each
            pool = [_targets(rng, ts[0].targets, mode, flags)
                    for _ in range(rng.choice((1, 2, 3)))]
            fresh = rng.random() < 0.4
            alike = rng.random() < 0.5                   # the parts of one task: one shape
            for i in range(rng.randrange(1, 40)):
                t = ts[0] if alike else rng.choice(ts)
                targets = _targets(rng, ts[0].targets, mode, flags) if fresh else \
                    rng.choice(pool)
                reqs = t.requirements if alike or rng.random() < 0.5 else _shrunk(t)
                made.append(TaskNode(len(made), t.launch, t.color, t.device, reqs, targets))
        assert_same(made)
