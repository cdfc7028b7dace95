"""Routes of a machine whose nodes repeat: the route from (node a, local device i) to (node b,
local j) is the route of a canonical pair of nodes (p, q) with the nodes' links renamed, so
a cluster of 128 DGX nodes needs the searches of 2 x 8 sources, not of every source asked.

Exact, not an approximation. Renaming nodes of one type is a symmetry of the link graph when
the global links join global switches only (a node type's links always join something of
its node: checks.py). A route from node a to node b (or inside node a) then stays on
R = node a, node b and the switches, provided that no route passes through a third node c:
it would enter c through one switch and leave through another, so every group of c's points
joined by point-to-point links (devices are never passed through) must touch at most one
switch. Then the routes.py search's choice among equal routes (a vertex takes the first
relaxation of its least latency; a level is ordered by latency, then by that relaxation's
place) is decided only by relaxations from R into R, whose relative order follows the
adjacency lists: a node's own lists are the same on every node of its type, a switch lists
node 0's links, then node 1's, ..., so renaming keeps their order when it keeps a < b.
Hence (p, q) is the first pair of nodes with a's and b's types and p < q exactly when
a < b (p = q inside one node). A machine that fails the conditions is searched pair by pair.
tests/strategy/test_route_symmetry.py compares every route with the plain search.
"""
from __future__ import annotations

from .errors import MachineModelError

# Renamed routes kept per (source, destination), at most: then the table starts again (a
# table of every pair grows with the square of the devices, as routes.py's searches would;
# remaking one from its template is a tuple of a few links).
KEPT_PAIRS = 1 << 18


def symmetric(model) -> bool:
    """Whether renaming nodes of one type maps routes to routes (the module doc's
    conditions)."""
    switches = set(model.switches)
    if any(e not in switches for ls in model.links for e in ls.ends):
        return False
    for nt in model.node_types.values():
        points = {p for p in nt.points if p not in switches}
        parent = {p: p for p in points}

        def find(p):
            while parent[p] != p:
                parent[p] = parent[parent[p]]
                p = parent[p]
            return p
        touched: dict[str, set] = {}
        for ls in nt.links:
            x, y = ls.ends
            if x in points and y in points:
                parent[find(x)] = find(y)
        for ls in nt.links:
            x, y = ls.ends
            for p, s in ((x, y), (y, x)):
                if p in points and s in switches:
                    touched.setdefault(p, set()).add(s)
        by_group: dict[str, set] = {}
        for p, s in touched.items():
            by_group.setdefault(find(p), set()).update(s)
        if any(len(s) > 1 for s in by_group.values()):
            return False
    return True


class NodeSymmetry:
    """route(a, b, routes): routes.route of the canonical pair, its links renamed to a's and
    b's nodes; kept per pair. Made only for a model that is symmetric()."""

    def __init__(self, model):
        self._node_of = model._node_of
        self._first = model._first
        self._types = model.nodes
        self._node_links = model._node_links       # per node, its links in declaration order
        self._place = model._link_place            # link name -> (node, index in that list)
        self._nodes: dict[tuple, tuple[int, int]] = {}      # (type, type, order) -> (p, q)
        self._templates: dict[tuple[int, int], tuple] = {}  # canonical pair -> renaming
        self._pairs: dict[tuple[int, int], tuple] = {}

    @classmethod
    def of(cls, model) -> "NodeSymmetry | None":
        return cls(model) if symmetric(model) else None

    def _canonical_nodes(self, ta: str, tb: str, order: int) -> tuple[int, int]:
        """The first (p, q) of types (ta, tb) with p < q (order -1), p == q (0), p > q (1)."""
        types = self._types
        if order == 0:
            p = types.index(ta)
            return p, p
        for p, t in enumerate(types):
            if t != ta:
                continue
            others = range(p + 1, len(types)) if order < 0 else range(p)
            q = next((q for q in others if types[q] == tb), None)
            if q is not None:
                return p, q
        raise AssertionError("a pair of nodes of these types exists: the one asked")

    def route(self, a: int, b: int, routes) -> tuple:
        got = self._pairs.get((a, b))
        if got is not None:
            return got
        node_of, first = self._node_of, self._first
        na, nb = node_of[a], node_of[b]
        key = (self._types[na], self._types[nb], (na > nb) - (na < nb))
        nodes = self._nodes.get(key)
        if nodes is None:
            nodes = self._nodes[key] = self._canonical_nodes(*key)
        p, q = nodes
        ca, cb = first[p] + a - first[na], first[q] + b - first[nb]
        if (ca, cb) == (a, b):
            return routes.route(a, b)
        try:
            links, latency, bandwidth = routes.route(ca, cb)
        except MachineModelError:
            raise MachineModelError(f"no route from device {a} to device {b}") from None
        template = self._templates.get((ca, cb))
        if template is None:
            template = self._templates[ca, cb] = self._template(links, p, q)
        mine, theirs = self._node_links[na], self._node_links[nb]
        renamed = tuple(mine[k] if w == 0 else theirs[k] if w == 1 else k
                        for w, k in template)
        # the same links' latencies summed in the same order: the same floats
        if len(self._pairs) >= KEPT_PAIRS:
            self._pairs.clear()
        got = self._pairs[a, b] = (renamed, latency, bandwidth)
        return got

    def _template(self, links, p: int, q: int) -> tuple:
        """Per link of the canonical route: (0, index) a link of node p, (1, index) of node
        q, (2, link) a global link."""
        out = []
        for link in links:
            node, k = self._place.get(link.name, (-1, -1))
            if node == p:
                out.append((0, k))
            elif node == q:
                out.append((1, k))
            elif node < 0:
                out.append((2, link))
            else:
                raise AssertionError(f"route of nodes {p}, {q} through node {node}")
        return tuple(out)
