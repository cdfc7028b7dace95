"""Routes by node symmetry (strategy/machines/symmetry.py): every (source, destination) route,
its latency, bandwidth and links, and every all-reduce's candidates equal the plain search's
(routes.py asked pair by pair, no renaming) on presets, on a machine file of mixed node
types, on random machines that repeat their nodes (latencies from a few values: equal routes
everywhere, so only the tie-break decides) and on machines where renaming would be wrong,
which must not be renamed."""
import random

import pytest

from strategy.machine_model import DEVICE_SPECS, LinkSpec, MachineModel, NodeType, machine_model
from strategy.machines import from_dict, load, to_dict
from strategy.machines.collectives import _candidates
from strategy.machines.presets import PRESETS, cluster_model
from strategy.machines.routes import Routes
from strategy.machines.symmetry import NodeSymmetry, symmetric
from tests.strategy.test_routes import dijkstra_routes, drawn, random_machine

LAT = [1e-6, 2e-6, 3e-6]


def plain_routes(model):
    """Routes found for the model's own pairs, no renaming."""
    return Routes(model._adj, model.num_devices)


def assert_routes_as_plain(model, sources=None):
    plain = plain_routes(fresh(model))
    n = model.num_devices
    for a in sources if sources is not None else range(n):
        for b in range(n):
            if a != b:
                got, want = model.route(a, b), plain.route(a, b)
                assert got == want, (model.name, a, b, [l.name for l in got[0]],
                                     [l.name for l in want[0]])
                assert model.transfer_time(1 << 20, a, b) == want[1] + (1 << 20) / want[2]


def fresh(model):
    return from_dict(to_dict(model))


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_presets_are_symmetric_and_route_as_the_plain_search(preset):
    build, default, _ = PRESETS[preset]
    model = build(max(default, 4))
    assert symmetric(model)
    assert_routes_as_plain(model)
    assert model._symmetry is not None


def test_large_dgx_h100_routes_from_few_searches():
    model = machine_model("dgx-h100:64")                # 512 devices
    rng = random.Random(1)
    sources = rng.sample(range(512), 12) + [0, 8, 511]
    assert_routes_as_plain(model, sources)
    searched = set(model._routes._searches)
    assert searched <= set(range(16))                  # nodes 0 and 1 only
    # asked again: the same objects
    assert model.route(300, 17) is model.route(300, 17)


def test_cluster_model_of_mixed_node_sizes():
    spec = DEVICE_SPECS["A100"]
    model = cluster_model("mixed", spec, [2, 4, 2, 3, 4, 2], intra=("shm", 2e-6, 3e9),
                          inter=("nic", 2e-6, 1e9))
    assert symmetric(model)
    assert_routes_as_plain(model)


def irregular_description(nodes) -> MachineModel:
    """Two node types: 'big' (4 devices, a host and a PCIe switch on one core switch, a NIC
    group of its own on a second, NVLink between some pairs), 'small' (2 devices, each
    wired to two switches directly); global switches joined in a ring; latencies equal so
    that routes tie."""
    big = NodeType(("H100",) * 4, ("host", "sw0", "nic0", "nic1"), (
        LinkSpec("pcie", ("d0", "sw0"), 1e-6, 6e10), LinkSpec("pcie", ("d1", "sw0"), 1e-6, 6e10),
        LinkSpec("pcie", ("d2", "host"), 1e-6, 6e10), LinkSpec("pcie", ("d3", "host"), 1e-6, 6e10),
        LinkSpec("pcie_switch", ("sw0", "host"), 1e-6, 6e10),
        LinkSpec("ib", ("host", "fabric0"), 1e-6, 5e10),
        LinkSpec("pcie", ("d0", "nic0"), 1e-6, 6e10), LinkSpec("pcie", ("d3", "nic1"), 1e-6, 6e10),
        LinkSpec("nic", ("nic0", "nic1"), 1e-6, 6e10, duplex=False),
        LinkSpec("ib", ("nic1", "fabric1"), 1e-6, 5e10),
        LinkSpec("nvlink", ("d1", "d2"), 1e-6, 4e11)))
    small = NodeType(("H100",) * 2, (), (
        LinkSpec("ib", ("d0", "fabric0"), 1e-6, 5e10), LinkSpec("ib", ("d0", "fabric1"), 1e-6, 5e10),
        LinkSpec("ib", ("d1", "fabric1"), 2e-6, 5e10), LinkSpec("nvlink", ("d0", "d1"), 1e-6, 4e11)))
    return MachineModel("irregular", {"H100": DEVICE_SPECS["H100"]}, {"big": big, "small": small},
                        nodes, ("fabric0", "fabric1", "core"),
                        (LinkSpec("ib", ("fabric0", "core"), 1e-6, 1e11),
                         LinkSpec("ib", ("core", "fabric1"), 1e-6, 1e11),
                         LinkSpec("ib", ("fabric1", "fabric0"), 1e-6, 1e11)))


def test_machine_file_of_irregular_node_types(tmp_path):
    path = tmp_path / "irregular.json"
    irregular_description(["small", "big", "big", "small", "big", "small"]).save(path)
    model = load(path)
    assert symmetric(model)
    assert_routes_as_plain(model)
    for src in range(model.num_devices):          # and the Dijkstra oracle of test_routes
        for dst, want in dijkstra_routes(fresh(model), src).items():
            assert model.route(src, dst) == want


def symmetric_random_machine(rng: random.Random, k: int) -> MachineModel:
    """One to three node types of random devices, points in groups (point links inside a
    group) each group wired to one global switch, devices wired to points, to each other
    and straight to any switches; switches joined at random; nodes of the types interleaved;
    latencies of three values."""
    switches = [f"fabric{i}" for i in range(rng.randint(1, 3))]
    types = {}
    for t in range(rng.randint(1, 3)):
        per_node = rng.randint(1, 4)
        groups = [[f"p{g}_{i}" for i in range(rng.randint(1, 2))]
                  for g in range(rng.randint(0, 3))]
        points = [p for g in groups for p in g]
        links = []
        for g in groups:
            s = rng.choice(switches)
            for p in g:
                if rng.random() < 0.8:
                    links.append(LinkSpec("ib", (p, s), rng.choice(LAT), 1e9,
                                          duplex=rng.random() < 0.8))
            for p, q in zip(g, g[1:]):
                links.append(LinkSpec("pcie_switch", (p, q), rng.choice(LAT), 3e9))
        for d in range(per_node):
            for p in rng.sample(points, rng.randint(0, len(points))):
                links.append(LinkSpec("pcie", (f"d{d}", p), rng.choice(LAT), 2e9))
            for s in rng.sample(switches, rng.randint(0 if points else 1, len(switches))):
                links.append(LinkSpec("ib", (f"d{d}", s), rng.choice(LAT), 1e9))
            for e in range(d + 1, per_node):
                if rng.random() < 0.3:
                    links.append(LinkSpec("nvlink", (f"d{d}", f"d{e}"), rng.choice(LAT), 5e9))
        types[f"t{t}"] = NodeType(("P100",) * per_node, tuple(points), tuple(links))
    glob = [LinkSpec("ib", (s, q), rng.choice(LAT), 2e9)
            for i, s in enumerate(switches) for q in switches[i + 1:] if rng.random() < 0.7]
    nodes = [rng.choice(list(types)) for _ in range(rng.randint(2, 6))]
    return MachineModel(f"sym{k}", {"P100": DEVICE_SPECS["P100"]}, types, nodes, switches, glob)


def test_random_symmetric_machines_route_as_the_plain_search():
    rng = random.Random(19)
    made = 0
    for model in drawn(symmetric_random_machine, rng, 150):
        assert symmetric(model)
        made += 1
        assert_routes_as_plain(model)
    assert made >= 100


def test_random_symmetric_machines_all_reduce_candidates_as_the_plain_search():
    rng = random.Random(23)
    compared = 0
    for model in drawn(symmetric_random_machine, rng, 80):
        n = model.num_devices
        groups = [tuple(range(n))] + [tuple(sorted(rng.sample(range(n), rng.randint(2, n))))
                                      for _ in range(3)] if n > 1 else []
        for group in groups:
            oracle = fresh(model)
            oracle._routes, oracle._symmetry = plain_routes(oracle), None
            oracle.route(0, n - 1)                   # keeps the plain search: no renaming
            assert oracle._symmetry is None
            assert _candidates(model, group) == _candidates(oracle, group, by_source=False)
            compared += 1
    assert compared > 150


def transit_machine() -> MachineModel:
    """Nodes of type 'a' on one switch, of 'b' on another, of 'c' (hosts on both) between:
    a route from an 'a' to a 'b' passes through the first 'c' node on the switch."""
    def node(switches):
        return NodeType(("P100",) * 2, ("host",), (
            LinkSpec("pcie", ("d0", "host"), 1e-6, 1e10),
            LinkSpec("pcie", ("d1", "host"), 1e-6, 1e10)) + tuple(
            LinkSpec("ib", ("host", s), 1e-6, 1e10) for s in switches))
    return MachineModel("transit", {"P100": DEVICE_SPECS["P100"]},
                        {"a": node(["fabric0"]), "b": node(["fabric1"]),
                         "c": node(["fabric0", "fabric1"])},
                        ["a", "c", "b", "a", "c", "b"], ("fabric0", "fabric1"))


def node_point_global_link_machine() -> MachineModel:
    """A global link to node 1's host only: node 1 is not like the others."""
    node = NodeType(("P100",) * 2, ("host",), (
        LinkSpec("pcie", ("d0", "host"), 1e-6, 1e10), LinkSpec("pcie", ("d1", "host"), 1e-6, 1e10),
        LinkSpec("ib", ("host", "fabric"), 1e-6, 1e10)))
    return MachineModel("extra", {"P100": DEVICE_SPECS["P100"]}, {"t": node}, ["t"] * 3,
                        ("fabric",), (LinkSpec("nvlink", ("n1/d0", "n2/d1"), 1e-6, 5e10),))


@pytest.mark.parametrize("build", [transit_machine, node_point_global_link_machine])
def test_machines_where_renaming_is_wrong_are_searched_pair_by_pair(build):
    model = build()
    assert not symmetric(model)
    assert_routes_as_plain(model)
    assert model._symmetry is None
    # renamed anyway, some route differs (the conditions are needed)
    forced = build()
    forced.route(0, 1)
    forced._symmetry = NodeSymmetry(forced)
    plain = plain_routes(build())
    n = forced.num_devices
    wrong = 0
    for a in range(n):
        for b in range(n):
            if a != b:
                try:
                    wrong += forced.route(a, b) != plain.route(a, b)
                except AssertionError:           # a canonical route through a third node
                    wrong += 1
    assert wrong


def test_random_unsymmetric_machines_route_as_the_plain_search():
    rng = random.Random(29)
    for model in drawn(random_machine, rng, 60):
        assert_routes_as_plain(model)


def test_the_renamed_routes_kept_are_bounded(monkeypatch):
    """A table of every pair grows with the square of the devices: it starts again at
    KEPT_PAIRS, and routes asked after that are the same."""
    import strategy.machines.symmetry as sym
    monkeypatch.setattr(sym, "KEPT_PAIRS", 5)
    model = machine_model("dgx-h100:4")
    plain = fresh(model)
    plain._routes, plain._symmetry = plain_routes(plain), None
    n = model.num_devices
    for a, b in [(0, n - 1), (3, 12), (9, 30), (30, 9), (17, 2), (8, 24), (1, 31), (0, n - 1)]:
        assert model.route(a, b) == plain._routes.route(a, b)
        assert len(model._symmetry._pairs) <= 5
