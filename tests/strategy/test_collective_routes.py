"""The all-reduce candidates (strategy/machines/collectives.py `_candidates`) ask for their
routes source by source: each source's route search is made once (routes.py keeps only the
last few), and the stages are exactly those of asking for the routes in the algorithms'
order (`by_source=False`, the oracle), on every preset and on random topologies with
random device groups."""
import random

import pytest

from strategy.machines import from_dict, machine_model, to_dict
from strategy.machines.collectives import _candidates
from strategy.machines.presets import PRESETS
from tests.strategy.test_routes import count_searches, drawn, random_machine


def random_groups(rng: random.Random, n: int, count: int) -> list[tuple[int, ...]]:
    groups = [tuple(range(n))] if n > 1 else []
    for _ in range(count):
        if n > 1:
            groups.append(tuple(sorted(rng.sample(range(n), rng.randint(2, n)))))
    return groups


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_candidates_by_source_equal_the_algorithms_order_on_presets(preset):
    build, default, _ = PRESETS[preset]
    rng = random.Random(preset)
    n_nodes = min(default, 3)
    for group in random_groups(rng, build(n_nodes).num_devices, 6):
        assert _candidates(build(n_nodes), group) == \
            _candidates(build(n_nodes), group, by_source=False), group


def test_candidates_by_source_equal_the_algorithms_order_on_random_topologies():
    rng = random.Random(11)
    compared = 0
    for model in drawn(random_machine, rng, 120):
        seed = rng.random()
        for group in random_groups(random.Random(seed), model.num_devices, 3):
            oracle = _rebuilt(model)
            assert _candidates(model, group) == _candidates(oracle, group, by_source=False)
            compared += 1
    assert compared > 200


def _rebuilt(model):
    """A fresh model equal to `model` (no routes asked yet)."""
    return from_dict(to_dict(model))


def test_each_source_searched_once(monkeypatch):
    made = count_searches(monkeypatch)
    model = machine_model("dgx-h100:32")                 # 256 devices on 32 nodes
    model.links_of_allreduce(tuple(range(256)))
    assert len(made) == len(set(made)) <= 256            # the algorithms' order: 853


def test_links_of_allreduce_in_declaration_order():
    """The links an all-reduce occupies, in the machine's declaration order (sorted by place,
    not filtered out of every link): as link_resources() lists them."""
    from strategy.machines.collectives import ORDER
    rng = random.Random(31)
    models = [PRESETS[p][0](min(PRESETS[p][1], 3)) for p in sorted(PRESETS)]
    while len(models) < len(PRESETS) + 20:
        try:
            models.append(random_machine(rng, len(models)))
        except Exception:
            pass
    checked = 0
    for model in models:
        for group in random_groups(rng, model.num_devices, 4):
            for nbytes in (None, 1 << 10, 1 << 30):
                got = model.links_of_allreduce(group, nbytes)
                cands = model._collectives[tuple(sorted(set(group)))]
                which = ORDER if nbytes is None else \
                    (model.allreduce_algorithm(nbytes, group)[0],)
                names = {n for a in which for stage in cands.get(a, ()) for part in stage
                         for n in part.links}
                assert got == tuple(l for l in model.link_resources() if l.name in names)
                checked += 1
    assert checked > 200
