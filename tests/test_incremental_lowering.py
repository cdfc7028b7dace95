"""IncrementalLowering: after any sequence of changes and restores, with configs that come
back, initial_of(names) is exactly lowered().initial for those regions (pieces in order),
and a change to a config seen before hands back the launches made then (the same objects),
which ask exactly what a fresh lowering's launches ask."""
import random
import warnings

from parallel_ops import SGD, lower
from parallel_ops.lowering import IncrementalLowering
from taskrt import Machine

from mpi.models import cnn, lstm_model, random_strategy
from plan_checks import expanded

warnings.simplefilter("ignore")


def test_changes_restores_and_remembered_configs_lower_as_from_scratch():
    for build in (cnn, lstm_model):
        model = build()[0]
        machine = Machine.grid(4, 1)
        strategy = random_strategy(model, 4, 1)
        lowering = IncrementalLowering(model, strategy, machine, SGD(lr=0.1))
        options = {op.name: [random_strategy(model, 4, s)[op.name] for s in (2, 3, 4)]
                   for op in model.ops}
        rng = random.Random(7)
        seen, revisits = {}, 0
        for step in range(40):
            op = rng.choice(model.ops)
            cfg = rng.choice(options[op.name])
            before = (lowering.configs[op.name], lowering.parts[op.name])
            part = lowering.change(op.name, cfg)
            if (op.name, cfg) in seen:
                assert part is seen[op.name, cfg], f"step {step}: not the remembered launches"
                revisits += 1
            seen[op.name, cfg] = part
            if rng.random() < 0.5:
                lowering.restore(op.name, *before)
            else:
                strategy = dict(strategy, **{op.name: cfg})
            fresh = lower(model, strategy, machine, SGD(lr=0.1))
            got = lowering.lowered()
            assert [expanded(l) for l in got.launches] == \
                [expanded(l) for l in fresh.launches], f"step {step}"
            want = {r.name: p for r, p in fresh.initial.items()}
            every = sorted(want)
            for names in (set(part.initial_forward) | set(part.initial_update),
                          set(rng.sample(every, min(5, len(every))))):
                got_initial = {r.name: p for r, p in lowering.initial_of(names).items()}
                assert got_initial == {n: want[n] for n in names if n in want}, \
                    f"step {step}: {sorted(names)[:4]}"
        assert revisits > 5
