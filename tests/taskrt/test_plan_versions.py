"""Planner.versions_since(mark): exactly the launches whose version changed since
next_version was `mark` (what delta simulation rebuilds), through replace, refresh and undo,
for marks of any age: None once the log no longer reaches back that far."""
import random
import warnings

from taskrt import Machine

from mpi.models import cnn, random_strategy
from plan_checks import planner_of, replace_strategy

warnings.simplefilter("ignore")


def _refreshed_cnn_planner():
    """(model, machine, strategy, planner) of the cnn on 4 devices, random strategy 1."""
    model, _ = cnn()
    machine = Machine.grid(4, 1)
    strategy = random_strategy(model, 4, seed=1)
    planner = planner_of(model, strategy, machine)
    planner.refresh()
    return model, machine, strategy, planner


def test_versions_since_names_exactly_the_changed_launches():
    model, machine, strategy, planner = _refreshed_cnn_planner()
    rng = random.Random(2)
    history = [(planner.next_version, planner.versions)]     # (mark, versions then)
    too_old = 0
    for step in range(150):
        op = rng.choice(model.ops)
        trial = dict(strategy, **{op.name: random_strategy(model, 4, 100 + step)[op.name]})
        replace_strategy(planner, model, trial, machine)
        planner.refresh()
        if rng.random() < 0.6:
            planner.undo()
        else:
            strategy = trial
        now = planner.versions
        for mark, then in history[-1:] + history[:1] + rng.sample(history, min(3, len(history))):
            got = planner.versions_since(mark)
            if got is None:
                too_old += 1
                continue
            assert got == [li for li, (a, b) in enumerate(zip(then, now)) if a != b], \
                f"step {step}, mark {mark}"
        history.append((planner.next_version, now))
    assert too_old, "the log should have dropped its oldest versions at least once"


def test_a_launch_whose_groups_come_out_as_before_keeps_its_version():
    """refresh() and undo() give a new version exactly to the launches whose groups are
    not all the very objects of before: a re-planned region marks every launch using it,
    and most of those launches' task groups come out as they were (the same task nodes
    and predecessors), so delta simulation need not rebuild them."""
    model, machine, strategy, planner = _refreshed_cnn_planner()
    rng = random.Random(3)
    kept = 0

    def check(before, mark, stale, where):
        nonlocal kept
        since = set(planner.versions_since(mark))
        for li in range(len(planner.plans)):
            now = planner.launch_groups(li)
            same = len(now) == len(before[li]) and all(a is b for a, b in zip(now, before[li]))
            assert (li not in since) == same, f"{where}: launch {li}"
            kept += same and li in stale
    for step in range(60):
        op = rng.choice(model.ops)
        trial = dict(strategy, **{op.name: random_strategy(model, 4, 100 + step)[op.name]})
        before = [planner.launch_groups(li) for li in range(len(planner.plans))]
        mark = planner.next_version
        replace_strategy(planner, model, trial, machine)
        stale = {key[0] for key in planner._stale}
        planner.refresh()
        check(before, mark, stale, f"step {step}, refresh")
        if rng.random() < 0.6:
            after = [planner.launch_groups(li) for li in range(len(planner.plans))]
            mark = planner.next_version
            planner.undo()
            planner.refresh()
            check(after, mark, stale, f"step {step}, undo")
        else:
            strategy = trial
    assert kept, "some re-planned launch should have kept all its groups"
