"""Routes (strategy/machines/routes.py): the level-by-level array search gives, for every pair
of devices, exactly the route of a heap-based Dijkstra on (links, latency) with first-come
ties (the oracle below, the search routes had before): on every preset and on random
topologies full of equal routes (latencies drawn from a few values, so ties are everywhere
and only the tie-break decides)."""
import heapq
import random

import pytest

from strategy.machine_model import DEVICE_SPECS, LinkSpec, MachineModel, NodeType, machine_model
from strategy.machines.presets import PRESETS
from strategy.machines import routes as routes_module
from strategy.machines.routes import KEPT_BYTES, SEARCH_BYTES, Routes


def dijkstra_routes(model, src):
    """Every route from device src, by a heap on (hops, latency, push order)."""
    adj, n_dev = model._adj, model.num_devices
    best, prev = {src: (0, 0.0)}, {}
    heap, seq = [(0, 0.0, 0, src)], 1
    while heap:
        hops, lat, _, v = heapq.heappop(heap)
        if best.get(v) != (hops, lat) or (v < n_dev and v != src):
            continue
        for w, link in adj[v]:
            key = (hops + 1, lat + link.latency)
            if w not in best or key < best[w]:
                best[w], prev[w] = key, (v, link)
                heapq.heappush(heap, (*key, seq, w))
                seq += 1
    out = {}
    for dst in range(n_dev):
        if dst == src:
            continue
        path, v = [], dst
        while v != src:
            v, link = prev[v]
            path.append(link)
        path.reverse()
        out[dst] = (tuple(path), sum(l.latency for l in path), min(l.bandwidth for l in path))
    return out


def assert_same_routes(model, sources=None):
    for src in sources if sources is not None else range(model.num_devices):
        for dst, want in dijkstra_routes(model, src).items():
            got = model.route(src, dst)
            assert got == want, (model.name, src, dst, [l.name for l in got[0]],
                                 [l.name for l in want[0]])


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_routes_as_dijkstra(preset):
    build, default, _ = PRESETS[preset]
    model = build(min(default, 3))
    assert_same_routes(model)


def test_large_machine_routes_as_dijkstra_and_keeps_few_searches():
    model = machine_model("dgx-h100:32")             # 256 devices
    sources = list(range(0, 256, 9)) + [255]
    assert_same_routes(model, sources)
    kept = model._routes._searches
    assert len(kept) * model._routes._num_vertices * SEARCH_BYTES <= max(
        KEPT_BYTES, routes_module.MIN_KEPT_SEARCHES * model._routes._num_vertices * SEARCH_BYTES)
    assert sum(a.nbytes for s in kept.values()
               for a in (s.level, s.lat, s.prev_vertex, s.prev_edge)) == \
        len(kept) * model._routes._num_vertices * SEARCH_BYTES
    # routes asked again (after their search was dropped) are the same objects
    again = model.route(0, 255)
    assert again is model.route(0, 255)


def count_searches(monkeypatch):
    made = []
    init = routes_module.Search.__init__

    def counted(self, src, graph):
        made.append(src)
        init(self, src, graph)
    monkeypatch.setattr(routes_module.Search, "__init__", counted)
    return made


def interleaved_pairs(n, rng):
    """Pairs of n devices asked as the collectives' groups and the copy lines ask them:
    source by source in a few passes, each pass over every source."""
    out = []
    for _ in range(3):
        for a in range(n):
            for b in rng.sample([d for d in range(n) if d != a], 3):
                out.append((a, b))
    return out


def test_every_search_kept_while_they_fit(monkeypatch):
    """Sources asked again after others (the collectives' groups, then the copy lines) keep
    their search: one search per source while all fit KEPT_BYTES (64 searches kept made a
    search per source and pass)."""
    made = count_searches(monkeypatch)
    model = machine_model("dgx-h100:32")             # 256 devices: all 256 searches fit
    routes = Routes(model._adj, model.num_devices)   # pair by pair (no node renaming)
    pairs = interleaved_pairs(256, random.Random(3))
    for a, b in pairs:
        routes.route(a, b)
    assert routes.kept >= 256
    assert sorted(made) == list(range(256))


@pytest.mark.parametrize("budget, searches", [(0, 3 * 256), (10 ** 6, 3 * 256), (10 ** 9, 256)])
def test_routes_as_dijkstra_whatever_is_kept(monkeypatch, budget, searches):
    """Searches dropped and made again (a budget keeping MIN_KEPT_SEARCHES of 256 sources)
    or all kept: every route equal to the oracle's."""
    monkeypatch.setattr(routes_module, "KEPT_BYTES", budget)
    made = count_searches(monkeypatch)
    model = machine_model("dgx-h100:32")
    routes = Routes(model._adj, model.num_devices)   # pair by pair (no node renaming)
    pairs = interleaved_pairs(256, random.Random(5))
    want = {a: dijkstra_routes(model, a) for a in range(0, 256)}
    for a, b in pairs:
        assert routes.route(a, b) == want[a][b], (a, b)
    assert len(made) == searches


def drawn(make, rng: random.Random, tries: int):
    """The machines make(rng, k) draws for k < tries, skipping a draw that fails (one with
    no route between two devices)."""
    for k in range(tries):
        try:
            yield make(rng, k)
        except Exception:
            continue


def random_machine(rng: random.Random, k: int) -> MachineModel:
    """Nodes of random sizes' devices joined to a few switches and to each other, with
    latencies from three values (ties everywhere) and some one-way-shared links."""
    per_node = rng.randint(1, 4)
    points = [f"sw{i}" for i in range(rng.randint(1, 3))]
    lat = [1e-6, 2e-6, 3e-6]
    links = []
    for d in range(per_node):
        for p in rng.sample(points, rng.randint(1, len(points))):
            links.append(LinkSpec("pcie", (f"d{d}", p), rng.choice(lat), rng.choice([1e9, 2e9]),
                                  duplex=rng.random() < 0.7))
    for d in range(per_node):
        for e in range(d + 1, per_node):
            if rng.random() < 0.3:
                links.append(LinkSpec("nvlink", (f"d{d}", f"d{e}"), rng.choice(lat), 5e9))
    for i, p in enumerate(points):
        for q in points[i + 1:]:
            if rng.random() < 0.5:
                links.append(LinkSpec("pcie_switch", (p, q), rng.choice(lat), 3e9))
    switches = [f"fabric{i}" for i in range(rng.randint(1, 3))]
    glob = []
    nodes = rng.randint(1, 4)
    for n in range(nodes):
        for p in points:
            for s in rng.sample(switches, rng.randint(1, len(switches))):
                glob.append(LinkSpec("ib", (f"n{n}/{p}", s), rng.choice(lat), 1e9,
                                     name=f"ib{k}-{n}-{p}-{s}"))
    for i, s in enumerate(switches[1:]):
        glob.append(LinkSpec("ib", (switches[i], s), rng.choice(lat), 1e9))
    node = NodeType(("P100",) * per_node, tuple(points), tuple(links))
    return MachineModel(f"random{k}", {"P100": DEVICE_SPECS["P100"]}, {"t": node},
                        ["t"] * nodes, switches, glob)


def test_random_topologies_route_as_dijkstra():
    rng = random.Random(7)
    made = 0
    for model in drawn(random_machine, rng, 200):
        made += 1
        assert_same_routes(model)
    assert made == 200
