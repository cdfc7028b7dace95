"""Routes between the devices of a MachineModel: the fewest links, then the least latency, never
through a third device; among equal routes, the one a Dijkstra search on (links, latency) with
first-come ties finds (the order links were declared in decides).

The search runs level by level, with arrays: every route of k links is settled once the
routes of k - 1 links are, so level k's vertices, their latencies and the link each is
reached by follow from level k - 1's in one vectorised step, exactly as a heap-based Dijkstra
with a push counter as its tie-break settles them (a vertex takes the first relaxation that
reaches its least latency; a level is popped by latency, then by that relaxation's place).
That is ~0.5 ms per source on 1,024 H100s (2,177 vertices) where a Python heap took 15 ms, so
a simulation whose copies start on 1,000 devices no longer spends seconds on routes.

A search goes only as far as the routes asked of it (a route inside a node settles in two
levels), and only what is asked for is kept: a route per (source, destination) pair, and the
searches of the last sources that fit KEPT_BYTES (a full table of routes grows with the square
of the devices: 16M routes at 4,096 GPUs; a search is 20 bytes a vertex).
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from .errors import MachineModelError

# Searches kept (per source: four arrays over the vertices, SEARCH_BYTES a vertex): as many
# as fit KEPT_BYTES, at least MIN_KEPT_SEARCHES. The collectives' groups (a source in its
# tensor- and its data-parallel group) and the copy lines ask the same sources in turn: with
# 64 kept, GPT-3 2.7B under Megatron t=8 at 1,024 H100s (2,177 vertices) made 3,036 searches
# of 12,128 levels (0.50 s); every source's kept (44 KB each, 45 MB), 1,024 of 4,096 (0.21 s).
# At 4,096 GPUs (8,705 vertices) ~390 fit.
KEPT_BYTES = 64 << 20
MIN_KEPT_SEARCHES = 64
SEARCH_BYTES = 20           # per vertex: latency (float64), level, vertex and edge (int32)


class Routes:
    """route(a, b) -> (links, total latency, slowest bandwidth) over `adj` (per vertex, its
    (neighbour, Link) list; vertices 0..num_devices-1 are the devices)."""

    def __init__(self, adj: list, num_devices: int):
        counts = np.fromiter((len(a) for a in adj), np.int64, len(adj))
        self._ptr = np.zeros(len(adj) + 1, np.int64)
        np.cumsum(counts, out=self._ptr[1:])
        edges = int(self._ptr[-1])
        self._nbr = np.fromiter((w for a in adj for w, _ in a), np.int64, edges)
        self._latency = np.fromiter((link.latency for a in adj for _, link in a),
                                    np.float64, edges)
        self._links = [link for a in adj for _, link in a]
        self._num_vertices = len(adj)
        self._num_devices = num_devices
        self._pairs: dict[tuple[int, int], tuple] = {}
        self._searches: OrderedDict[int, Search] = OrderedDict()
        self.kept = max(MIN_KEPT_SEARCHES, KEPT_BYTES // (SEARCH_BYTES * max(len(adj), 1)))

    def route(self, a: int, b: int) -> tuple[tuple, float, float]:
        """The route from device a to device b (a != b, both valid device ids)."""
        got = self._pairs.get((a, b))
        if got is None:
            found = self._searches.get(a)
            if found is None:
                found = self._searches[a] = Search(a, self)
                if len(self._searches) > self.kept:
                    self._searches.popitem(last=False)
            else:
                self._searches.move_to_end(a)
            found.until(b)
            links, v = [], b
            while v != a:
                links.append(self._links[found.prev_edge[v]])
                v = found.prev_vertex[v]
            links.reverse()
            got = self._pairs[a, b] = (tuple(links), sum(l.latency for l in links),
                                       min(l.bandwidth for l in links))
        return got


class Search:
    """The route search from one source, run level by level as far as asked (until()):
    per vertex, the vertex and the edge (index into the CSR arrays) its route arrives by
    (-1: the source, or not reached yet). Devices other than the source are reached but
    never passed through. See the module doc for why this equals Dijkstra."""
    __slots__ = ("src", "graph", "level", "lat", "prev_vertex", "prev_edge", "frontier",
                 "hops")

    def __init__(self, src: int, graph: Routes):
        n = graph._num_vertices
        self.src, self.graph = src, graph
        self.level = np.full(n, -1, np.int32)
        self.lat = np.zeros(n)
        self.prev_vertex = np.full(n, -1, np.int32)
        self.prev_edge = np.full(n, -1, np.int32)
        self.level[src] = 0
        self.frontier = np.array([src], np.int64)     # the last level's vertices, in pop order
        self.hops = 0

    def until(self, dst: int) -> None:
        """Settle levels until `dst` is reached (every route is final once its level is)."""
        g, src, level, lat = self.graph, self.src, self.level, self.lat
        while level[dst] < 0:
            frontier = self.frontier
            expand = frontier[(frontier >= g._num_devices) | (frontier == src)]
            starts = g._ptr[expand]
            counts = g._ptr[expand + 1] - starts
            total = int(counts.sum())
            # every edge out of the level, in relaxation order (vertex by vertex, in order)
            edge = np.repeat(starts - (np.cumsum(counts) - counts), counts) + np.arange(total)
            source = np.repeat(expand, counts)
            to = g._nbr[edge]
            reach = lat[source] + g._latency[edge]
            new = np.flatnonzero(level[to] == -1)      # to vertices no shorter route settled
            if not new.size:
                raise MachineModelError(f"no route from device {src} to device {dst}")
            to_new, reach_new = to[new], reach[new]
            # per vertex: its least latency, at its first relaxation reaching it
            order = np.lexsort((new, reach_new, to_new))
            first = np.ones(order.size, bool)
            first[1:] = to_new[order[1:]] != to_new[order[:-1]]
            pick = order[first]
            vertex, vlat, at = to_new[pick], reach_new[pick], new[pick]
            self.hops += 1
            level[vertex] = self.hops
            lat[vertex] = vlat
            self.prev_vertex[vertex] = source[at]
            self.prev_edge[vertex] = edge[at]
            self.frontier = vertex[np.lexsort((at, vlat))]
