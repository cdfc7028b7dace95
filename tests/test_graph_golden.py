"""Golden digests of whole TaskGraphs: a refactor of the planner, the coherence code or the
node types must give, node for node, the graphs it gave before.

A digest covers every node's description and predecessors (the fingerprint) and what the
fingerprint leaves out: each task's Red+ targets, each reduce's inputs, each copy's source
buffer, each all-reduce's partial flags, and each region's buffers and valid pieces at the
start and end. A change that is meant to change graphs updates GOLDEN: run
`python tests/test_graph_golden.py` and paste what it prints, saying why in the commit.
"""
import hashlib
import random

import pytest

from parallel_ops import SGD, lower
from strategy.costs.app_profile import load_app
from taskrt import Machine, plan

from mpi.models import cnn, lstm_model, mlp, random_strategy

DEVICES = 4


def digest(graph) -> str:
    h = hashlib.blake2b(graph.fingerprint().encode(), digest_size=16)
    for n in graph.nodes:
        kind = str(n.kind)
        if kind == "task":
            extra = [None if t is None else [(str(piece), bool(partial), bool(acc))
                                             for piece, partial, acc in t] for t in n.targets]
        elif kind == "reduce":
            extra = [(i.source, str(i.rect), i.copy_id) for i in n.inputs]
        elif kind == "copy":
            extra = (n.reduction, n.from_partial)
        else:
            extra = tuple(n.in_partial)
        h.update(f"{n.id} {kind} {extra}".encode())
    for table in (graph.instance_rects, graph.partial_rects):
        h.update(repr(sorted((k, str(r)) for k, r in table.items())).encode())
    for table in (graph.initial_valid, graph.final_valid, graph.final_pending):
        h.update(repr(sorted((k, [tuple(map(str, p)) for p in v])
                             for k, v in table.items())).encode())
    return h.hexdigest()


def _small(build):
    def graph(seed):
        model, _ = build()
        machine = Machine.grid(DEVICES, 1)
        strategy = {} if seed is None else random_strategy(model, DEVICES, seed)
        low = lower(model, strategy, machine, SGD(lr=0.1))
        return plan(low.launches, machine, initial=low.initial)
    return graph


def _app(name):
    def graph(seed):
        built = load_app(name, ["--small"], devices=DEVICES)
        model, machine = built.model, Machine.grid(DEVICES, 1)
        strategy = {} if seed is None else random_strategy(model, DEVICES, seed)
        low = lower(model, strategy, machine, built.optimizer)
        return plan(low.launches, machine, initial=low.initial)
    return graph


BUILDS = {"mlp": _small(mlp), "cnn": _small(cnn), "lstm": _small(lstm_model),
          "inception": _app("inception"), "nmt": _app("nmt")}
CASES = [(app, seed) for app in ("mlp", "cnn", "lstm") for seed in (None, 1, 2, 3)] + \
    [(app, seed) for app in ("inception", "nmt") for seed in (None, 5)]

GOLDEN = {
    ('mlp', None): '89322d919971a3037cfac323640d7cba',
    ('mlp', 1): 'd9982e63da0ad5e6d9bac0fc782f2057',
    ('mlp', 2): 'ad072faec1b224967290149e555cef5e',
    ('mlp', 3): 'b09d8c1a4112e58ef5b68deab7d5f534',
    ('cnn', None): '7ba3288851ecf2b1ef0bb823f77a2d9f',
    ('cnn', 1): '5b5ef6333ade942a490d5709cc7ebd8e',
    ('cnn', 2): '5090a454627bca80954d43e7051402fa',
    ('cnn', 3): 'bc7d8ff8c96b9c0d9e72db42fc673e5d',
    ('lstm', None): 'e72a9207bbf04b3d298d4a86aef55f7e',
    ('lstm', 1): 'b1bf8d643424cfbbc744e0f04b585b15',
    ('lstm', 2): '08a1bf18c5e4d1baf7ccecb0b1e40e8a',
    ('lstm', 3): '7c6c323bc852acbfe5cd1c7e0610fe32',
    ('inception', None): '2fd38f76c435b0da9b6980120efba42a',
    ('inception', 5): 'd3f331e75ba574546d5c201c6848a5a5',
    ('nmt', None): '9c762b7b6ea3625acbec3c62c74fd013',
    ('nmt', 5): 'd4552821214c19b8e451d85ee21d1a3f',
}


@pytest.mark.parametrize("app,seed", CASES, ids=[f"{a}-{s}" for a, s in CASES])
def test_graph_is_the_golden_one(app, seed):
    random.seed(0)
    assert digest(BUILDS[app](seed)) == GOLDEN[app, seed]


@pytest.mark.parametrize("app,seed", CASES, ids=[f"{a}-{s}" for a, s in CASES])
def test_graph_is_the_golden_one_with_the_python_walk(app, seed, monkeypatch):
    """The same graphs with taskrt.coherence.COMPILED_READS off (the Python walk over a
    RectIndex, the compiled read planner's oracle; on by default)."""
    from taskrt import coherence
    monkeypatch.setattr(coherence, "COMPILED_READS", False)
    random.seed(0)
    assert digest(BUILDS[app](seed)) == GOLDEN[app, seed]


if __name__ == "__main__":
    for app, seed in CASES:
        print(f"    ({app!r}, {seed}): {digest(BUILDS[app](seed))!r},")
