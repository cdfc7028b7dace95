"""Planner.versions_since(mark): exactly the launches whose version changed since
next_version was `mark` (what delta simulation rebuilds), through replace, refresh and undo,
for marks of any age: None once the log no longer reaches back that far."""
import random
import warnings

from taskrt import Machine

from mpi.models import cnn, random_strategy
from plan_checks import planner_of, replace_strategy

warnings.simplefilter("ignore")


def test_versions_since_names_exactly_the_changed_launches():
    model, _ = cnn()
    machine = Machine.grid(4, 1)
    strategy = random_strategy(model, 4, seed=1)
    planner = planner_of(model, strategy, machine)
    planner.refresh()
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
