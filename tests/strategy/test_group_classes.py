"""A task group's templates found from its classes column by column
(strategy/taskgroups.py RUN_CLASSES: taskclasses.classes_of_run) and a template's buffer ids
made for all its entries at once (strategy/delta_memory.py ROW_BATCH:
BufferTable.ids_on_rows) give what a class_key per task and ids_on per entry give: the
same GroupSims and the same buffer table (every id, device and region index in the same
order), over random strategies, changes and undos, uneven parts (several classes in one
launch) included."""
import random
import warnings

import numpy as np
import pytest

import strategy.delta_memory as delta_memory
import strategy.taskgroups as taskgroups
from parallel_ops import ParallelConfig
from strategy.costs import CostModel
from strategy.delta import SimulationSession
from strategy.delta_memory import BufferTable
from strategy.machine_model import machine_model

from mpi.models import cnn, lstm_model, mlp, random_strategy

warnings.simplefilter("ignore")       # analytic-cost fallback warnings

_ARRAYS = ("dur", "res_counts", "res_ids", "buf_counts", "buf_ids")


def snapshot(session) -> tuple:
    """The session's task groups' arrays and its buffer table, as plain values."""
    sims = []
    for block in session._blocks:
        for group, sim in zip(block.groups, block.sims):
            if group.key[1] is None:
                sims.append((group.key, [getattr(sim, a).tolist() for a in _ARRAYS],
                             sorted(sim.read_by_writers),
                             {w: sorted(r) for w, r in sim.reads_of_writers.items()}))
    table = session._buffers
    return (sims, [(plain(key), b) for key, b in table.ids.items()], table.dev.items,
            table.region.items, list(table.region_index.items()), table.own_bytes.items,
            table.staging.items, table.state.items, session.result.makespan,
            session.result.memory)


def plain(key: tuple) -> tuple:
    """A buffer key with a staging buffer's copy node as its repr (another run's node)."""
    last = key[3]
    return key[:3] + (last if last is None or isinstance(last, (int, str, tuple))
                      else repr(last),)


def steps(model, seed, strategy=None, changes=6) -> list:
    """Snapshots of a session of `model` over random changes and undos."""
    rng = random.Random(seed)
    session = SimulationSession(model, machine_model("p100:1"), CostModel(),
                                strategy or random_strategy(model, 4, seed))
    out = [snapshot(session)]
    for k in range(changes):
        op = rng.choice(model.ops)
        session.change(op.name, random_strategy(model, 4, 1000 * seed + k)[op.name])
        out.append(snapshot(session))
        if k % 2:
            session.undo()
            out.append(snapshot(session))
    return out


def both(monkeypatch, run) -> None:
    """`run()` with the new paths and with the oracles: equal."""
    monkeypatch.setattr(taskgroups, "RUN_CLASSES", False)
    monkeypatch.setattr(delta_memory, "ROW_BATCH", False)
    want = run()
    monkeypatch.setattr(taskgroups, "RUN_CLASSES", True)
    monkeypatch.setattr(delta_memory, "ROW_BATCH", True)
    got = run()
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a == b


@pytest.mark.parametrize("build,seed", [(mlp, 1), (mlp, 2), (cnn, 3), (cnn, 4),
                                        (lstm_model, 5), (lstm_model, 6)])
def test_group_classes_equal_per_task_classes(build, seed, monkeypatch):
    model = build()[0]
    both(monkeypatch, lambda: steps(model, seed))


def test_uneven_parts_several_classes_per_launch(monkeypatch):
    model = mlp()[0]
    strategy = {op.name: ParallelConfig.of([0, 1, 2], n=3) for op in model.ops
                if "n" in {d.name for d in op.dims}}
    both(monkeypatch, lambda: steps(model, 7, strategy))


def test_ids_on_rows_numbers_as_ids_on_in_turn(monkeypatch):
    """Random patterns (repeated entries included) over random devices, buffers made
    before through id() and ids_on: the same ids and table as ids_on entry by entry."""
    rng = np.random.default_rng(0)
    calls = []
    for _ in range(300):
        names = [("instance" if rng.random() < 0.7 else "partial", f"r{rng.integers(40)}")
                 for _ in range(rng.integers(1, 6))]
        devices = rng.integers(0, 8, size=rng.integers(1, 12))
        calls.append((rng.integers(3), tuple(names), devices))

    def run():
        table, out = BufferTable(8), []
        for how, pattern, devices in calls:
            if how == 0:        # a buffer made by id() before (its device's id known)
                kind, name = pattern[0]
                table.id((kind, name, int(devices[0]), None), 0)
            elif how == 1:
                table.ids_on(*pattern[0], devices)
            out.append(table.ids_on_rows(pattern, devices).tolist())
        return [(out, list(table.ids.items()), table.dev.items, table.region.items,
                 list(table.region_index.items()))]
    both(monkeypatch, run)


def test_megatron_gpt_several_requirement_counts_per_launch(monkeypatch):
    """Megatron's sharded attention and projections: a launch whose tasks ask different
    numbers of requirements (a bias read by one shard of each group)."""
    import argparse

    from apps.gpt import build
    from strategy.experts import megatron
    net = build(argparse.Namespace(small=True, config=None, seed=0, dtype="float32",
                                   batch_size=4, vocab=None, width=None, heads=None,
                                   layers=None, seq_len=None))
    model = net.model
    strategy = megatron(model, 4, 4, tensor_parallel=2)

    def run():
        rng = random.Random(3)
        session = SimulationSession(model, machine_model("p100:1"), CostModel(), strategy)
        lengths = {len({len(n.requirements) for n in g.nodes}) for b in session._blocks
                   for g in b.groups if g.key[1] is None}
        assert max(lengths) >= 2
        out = [snapshot(session)]
        for k in range(3):
            op = rng.choice(model.ops)
            session.change(op.name, random_strategy(model, 4, 300 + k)[op.name])
            out.append(snapshot(session))
            session.undo()
            out.append(snapshot(session))
        return out
    both(monkeypatch, run)
