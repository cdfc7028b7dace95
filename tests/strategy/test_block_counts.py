"""The counts SimulationSession keeps of the regions its writing tasks read (what
_kept_regions derives the graph's results from): a launch block put in place of another
updates them unless its writers read exactly what the old one's did, and task groups that
read and write alike share one pair of reads objects (what _put_block compares)."""
import dataclasses
import random

from parallel_ops import SGD
from strategy.costs import CostModel
from strategy.delta import SimulationSession
from strategy.launchblocks import LaunchBlock
from strategy.machines import machine_model
from strategy.standard import random_config
from parallel_ops.errors import ConfigError
from taskrt import PlanError

from mpi.models import cnn


def _session():
    model, _ = cnn()
    return model, SimulationSession(model, machine_model("p100:1"), CostModel(), None,
                                    SGD(lr=0.1))


def _counts(session):
    return (dict(session._read_by_writers),
            {w: sorted(tuple(sorted(r)) for r, _ in per.values())
             for w, per in session._writers_of.items() if per})


def test_a_block_whose_writers_read_otherwise_updates_the_counts():
    _, session = _session()
    li = next(i for i, b in enumerate(session._blocks) if b.writers)
    old = session._blocks[li]
    before = _counts(session)
    written = next(iter(old.writers[0].reads_of_writers))
    sims = [dataclasses.replace(s, read_by_writers=s.read_by_writers | {"zz"},
                                reads_of_writers={**s.reads_of_writers, written: {"zz"}})
            if s in old.writers else s for s in old.sims]
    session._put_block(li, LaunchBlock.of(old.version, old.groups, sims))
    got = _counts(session)
    assert got[0]["zz"] == len(old.writers)
    assert ("zz",) in got[1][written]
    # The same reads in new GroupSims: nothing to count again; the old block back: as before.
    same = [dataclasses.replace(s) for s in sims]
    session._put_block(li, LaunchBlock.of(old.version, old.groups, same))
    assert _counts(session) == got
    session._put_block(li, old)
    assert _counts(session) == before


def test_task_groups_of_other_configs_share_their_reads():
    model, session = _session()
    devices = list(range(len(session.machine_model.taskrt_machine())))
    rng = random.Random(5)
    shared = 0
    for step in range(20):
        before = list(session._blocks)
        op = rng.choice(model.ops)
        try:
            session.change(op.name, random_config(op, devices, rng))
        except (ConfigError, PlanError):
            continue
        for old, new in zip(before, session._blocks):
            if new is old or len(new.writers) != len(old.writers):
                continue
            for a, b in zip(old.writers, new.writers):
                if a is not b and a.read_by_writers == b.read_by_writers and \
                        a.reads_of_writers == b.reads_of_writers:
                    assert a.read_by_writers is b.read_by_writers, f"step {step}"
                    assert a.reads_of_writers is b.reads_of_writers, f"step {step}"
                    shared += 1
        # and the counts are those a fresh session of these configs keeps
        fresh = SimulationSession(model, session.machine_model, session.costs,
                                  dict(session.configs), SGD(lr=0.1))
        assert _counts(session) == _counts(fresh), f"step {step}"
        assert session._kept_regions() == fresh._kept_regions(), f"step {step}"
        if rng.random() < 0.5:
            session.undo()
    assert shared, "some changed launch's writers should read what the old ones read"
