"""TaskClasses.of (taskrt/taskclasses.py), which finds classes per run of one launch's
tasks, equals the loop over the tasks asking class_key of each: the same classes, numbered
the same, with the same first tasks, on the graphs of tests/strategy/test_sim_classes.py,
on their tasks reordered and thinned (other runs), and on tasks made of mixed real parts
(requirements and Red+ targets of other tasks: the per-task fallback; Red+ targets in some
tasks of a run only)."""
import random

import numpy as np
import pytest

from taskrt.geometry import Rect
from taskrt.privilege import RegionRequirement
from taskrt.taskclasses import TaskClasses, class_key
from taskrt.taskgraph import TASK, TaskNode

from test_sim_classes import CASES, graph_of


def by_task(nodes):
    """TaskClasses.of as a loop over the nodes: class_key per task (ids: positions in
    `nodes`, as a graph's node i is at index i)."""
    classes, first, ids, of, devices, others = {}, [], [], [], [], []
    for i, node in enumerate(nodes):
        if node.kind is not TASK:
            others.append(i)
            continue
        c = classes.setdefault(class_key(node), len(first))
        if c == len(first):
            first.append(node)
        ids.append(i), of.append(c), devices.append(node.device)
    return ids, of, devices, first, others


def assert_same(nodes):
    got = TaskClasses.of(nodes)
    ids, of, devices, first, others = by_task(nodes)
    assert got.ids.tolist() == ids and got.cls.tolist() == of
    assert got.device.tolist() == devices and got.others.tolist() == others
    assert len(got.first) == len(first) and all(map(lambda a, b: a is b, got.first, first))


@pytest.mark.parametrize("name,seed", CASES)
def test_classes_per_run_equal_classes_per_task(name, seed):
    graph, _ = graph_of(name, seed)
    nodes = list(graph.nodes)
    assert_same(nodes)
    rng = random.Random(seed + 100)
    for _ in range(20):
        some = [n for n in nodes if rng.random() < 0.7]
        if rng.random() < 0.5:
            rng.shuffle(some)
        assert_same(some)


@pytest.mark.parametrize("name,seed", CASES)
def test_tasks_of_mixed_parts(name, seed):
    """Tasks whose requirements (region, privilege, rect) and Red+ targets come from other
    tasks of the graph, a few launches for many tasks: alike runs and not."""
    graph, _ = graph_of(name, seed)
    tasks = [n for n in graph.nodes if n.kind is TASK]
    rng = random.Random(seed + 200)
    launches = list({id(t.launch): t.launch for t in tasks}.values())[:3]
    for _ in range(60):
        made = []
        templates = rng.sample(tasks, min(rng.choice((1, 4)), len(tasks)))
        swap = rng.choice((0.0, 0.3))     # none: runs of alike tasks
        for i in range(rng.randrange(1, 40)):
            template = rng.choice(templates)
            reqs, targets = list(template.requirements), list(template.targets)
            for k in range(len(reqs)):
                other = rng.choice(tasks)
                if rng.random() < swap and other.requirements:
                    j = rng.randrange(len(other.requirements))
                    reqs[k], targets[k] = other.requirements[j], other.targets[j]
            reds = [t for t in targets if t is not None]
            if reds and rng.random() < 0.5:   # Red+ targets in some tasks of a run only
                k = rng.randrange(len(targets))
                targets[k] = None if rng.random() < 0.5 else rng.choice(reds)
            if rng.random() < 0.1 and len(reqs) > 1:
                reqs, targets = reqs[:-1], targets[:-1]
            made.append(TaskNode(i, rng.choice(launches), template.color, template.device,
                                 tuple(reqs), tuple(targets)))
        if rng.random() < 0.5:                # long runs; else runs of a few
            made.sort(key=lambda n: id(n.launch))
        assert_same(made)


def tasks_by_launch(name, seed):
    """The tasks of a test graph, and them per launch (in order of each launch's first)."""
    graph, _ = graph_of(name, seed)
    tasks = [n for n in graph.nodes if n.kind is TASK]
    by_launch: dict = {}
    for t in tasks:
        by_launch.setdefault(id(t.launch), []).append(t)
    return tasks, list(by_launch.values())


@pytest.mark.parametrize("name,seed", [("gpt-t4", -1), ("gpt-t2", -1), ("cnn", 3),
                                       ("inception", 3)])
def test_runs_of_mixed_requirement_counts(name, seed):
    """Runs of one launch whose tasks ask different numbers of requirements (as Megatron's
    sharded attention, a bias read by one shard of each group), each count's tasks alike
    column by column (the regions and privileges of one launch, parts of several shapes):
    split by count, numbered in order of the first task as the loop over the tasks."""
    _, per_launch = tasks_by_launch(name, seed)
    rng = random.Random(seed + 300)
    launches = [ts for ts in per_launch if len(ts[0].requirements) > 1]
    for _ in range(40):
        made = []
        for ts in rng.sample(launches, min(3, len(launches))):
            n = len(ts[0].requirements)
            ts = [t for t in ts if len(t.requirements) == n]
            drops = [(), (rng.randrange(n),), tuple(rng.sample(range(n), 2))]
            for i in range(rng.randrange(2, 60)):
                drop = rng.choice(drops)
                reqs, targets = [], []
                for k in range(n):
                    if k in drop:
                        continue
                    t = rng.choice(ts)          # the launch's column k: shapes vary
                    reqs.append(t.requirements[k]), targets.append(t.targets[k])
                made.append(TaskNode(len(made), ts[0].launch, ts[0].color, ts[0].device,
                                     tuple(reqs), tuple(targets)))
        assert_same(made)


@pytest.mark.parametrize("name,seed", [("gpt-t4", -1), ("cnn", 3)])
def test_runs_of_rects_shape_not_asked(name, seed):
    """Runs whose parts are new rects, some of whose shape was asked before and some not
    (TaskClasses reads the kept shapes and asks the others'): classes as the loop's."""
    graph, _ = graph_of(name, seed)
    tasks = [n for n in graph.nodes if n.kind is TASK]
    rng = random.Random(seed + 400)
    for _ in range(20):
        made = []
        for t in rng.sample(tasks, min(30, len(tasks))):
            launch = t.launch
            for i in range(rng.randrange(1, 20)):
                reqs = []
                for r in t.requirements:
                    rect = Rect(r.rect.lo, r.rect.hi) if rng.random() < 0.7 else r.rect
                    if rng.random() < 0.3:
                        rect.shape                    # asked: kept
                    reqs.append(RegionRequirement(r.region, rect, r.privilege))
                made.append(TaskNode(len(made), launch, t.color, t.device, tuple(reqs),
                                     t.targets))
        made.sort(key=lambda n: id(n.launch))
        assert_same(made)


@pytest.mark.parametrize("name,seed", [("gpt-t4", -1), ("gpt-t2", -1), ("cnn", 3)])
def test_runs_sharing_a_few_requirement_tuples(name, seed):
    """Long runs whose tasks share a few requirements tuples (an update launch of sharded
    weights: one tuple per shard), which TaskClasses checks over the distinct tuples: parts
    of one shape, of several (the per-task shapes), and a tuple of another region or
    privilege among them (the per-task fallback), as the loop over the tasks."""
    tasks, launches = tasks_by_launch(name, seed)
    rng = random.Random(seed + 500)
    seen = set()
    for _ in range(60):
        ts = rng.choice(launches)
        n = len(ts[0].requirements)
        ts = [t for t in ts if len(t.requirements) == n]
        shape = rng.random() < 0.5          # one part shape per column: the shortcut's
        pool = []
        for _ in range(rng.randrange(1, 5)):
            reqs = []
            for k in range(n):
                r = rng.choice(ts).requirements[k]
                if shape:
                    r = RegionRequirement(r.region, Rect(r.rect.lo, r.rect.hi), r.privilege)
                    r = ts[0].requirements[k] if rng.random() < 0.5 else \
                        RegionRequirement(r.region, Rect(ts[0].requirements[k].rect.lo,
                                                         ts[0].requirements[k].rect.hi),
                                          r.privilege)
                reqs.append(r)
            if rng.random() < 0.1 and n:    # another region or privilege at a position
                other = rng.choice(tasks)
                if other.requirements:
                    reqs[rng.randrange(n)] = rng.choice(other.requirements)
            pool.append(tuple(reqs))
        made = [TaskNode(i, ts[0].launch, ts[0].color, ts[0].device, rng.choice(pool),
                         ts[0].targets) for i in range(rng.randrange(17, 90))]
        seen.add((shape, len({id(t.requirements) for t in made}) * 4 <= len(made)))
        assert_same(made)
    assert seen >= {(True, True), (False, True)}


@pytest.mark.parametrize("name,seed", [("gpt-t4", -1), ("gpt-t2", -1), ("cnn", 3)])
def test_runs_sharing_targets_tuples(name, seed):
    """Runs of a launch whose tasks' Red+ targets are the very tuples of an earlier run (a
    class's members share their template's), in the same order or with the first and last
    alike and others swapped: TaskClasses remembers a run's patterns by the tuples'
    identities, and the classes are the loop's."""
    graph, _ = graph_of(name, seed)
    tasks = [n for n in graph.nodes if n.kind is TASK]
    reds = [t for t in tasks if any(x is not None for x in t.targets)]
    if not reds:
        pytest.skip("no Red+ task")
    launches = list({id(t.launch): t.launch for t in tasks}.values())
    rng = random.Random(seed + 600)
    for _ in range(40):
        t = rng.choice(reds)
        n = len(t.targets)
        pool = [t.targets, (None,) * n, tuple(x if rng.random() < 0.5 else None
                                              for x in t.targets)]
        first = [rng.choice(pool) for _ in range(rng.randrange(3, 30))]
        made = []
        for k in range(rng.randrange(2, 6)):
            targets = list(first)
            if k and rng.random() < 0.6:      # the same ends, the middle changed
                for i in range(1, len(targets) - 1):
                    if rng.random() < 0.5:
                        targets[i] = rng.choice(pool)
            made += [TaskNode(len(made) + i, t.launch, t.color, t.device, t.requirements, x)
                     for i, x in enumerate(targets)]
            other = rng.choice(launches)        # (another launch's task between runs)
            made.append(TaskNode(len(made), other, t.color, t.device, (), ()))
        assert_same(made)
