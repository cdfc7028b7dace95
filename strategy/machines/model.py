"""MachineModel: nodes of devices joined by links, the route of a transfer between any two
devices, its time, and (via collectives.py) the cost of an all-reduce.

A model is built from a description (device specs by kind, node types, the list of nodes,
global switches, extra links); presets, files and calibration all produce one. The
description is the model's identity: equality, files and round trips use it.

Routing: the links form a graph whose vertices are devices and named points (switches, the
host, NICs, the network "fabric"). A transfer from device a to device b takes the route with
the fewest links, then the least total latency; it never passes through a third device.
Routes are found on demand and kept (routes.py); where the nodes repeat, a route is a
canonical pair's with the nodes renamed (symmetry.py). Owns no simulation: the simulator
decides when transfers run; this module says which links they occupy and for how long.
"""
from __future__ import annotations

import math
import operator
from typing import Iterable, Mapping, Sequence

from .checks import check_description
from .errors import MachineModelError
from .routes import Routes
from .symmetry import NodeSymmetry
from .specs import HOST_KINDS, DeviceSpec, HostCost, Link, LinkSpec, NodeType


class MachineModel:
    """Nodes x devices with links; routes, transfer times and all-reduce costs.

        m = machine_model("p100:2")               # 2 nodes x 4 P100
        m.transfer_time(4 << 20, 0, 5)            # seconds, across nodes
        m.path(0, 5)                              # (pcie, ib, ib, pcie) Links
        m.allreduce_time(100 << 20, range(8))     # cheapest of ring, tree, hierarchical
    """

    def __init__(self, name: str, device_specs: Mapping[str, DeviceSpec],
                 node_types: Mapping[str, NodeType], nodes: Sequence[str],
                 switches: Sequence[str] = (), links: Sequence[LinkSpec] = (),
                 allreduce_efficiency: float = 1.0, summary: str = "",
                 calibration: Mapping | None = None,
                 host_costs: Mapping[str, HostCost] | None = None):
        self.name = name
        self.device_specs = dict(device_specs)
        self.node_types = dict(node_types)
        self.nodes = tuple(nodes)
        self.switches = tuple(switches)
        self.links = tuple(links)
        self.allreduce_efficiency = allreduce_efficiency
        self.summary = summary
        self.calibration = dict(calibration or {})
        # Host time per node kind (only the non-zero ones are kept: zero is the default).
        self.host_costs = {k: c for k, c in (host_costs or {}).items() if c != HostCost()}
        problems = check_description(self.device_specs, self.node_types, self.nodes,
                                     self.switches, self.links, allreduce_efficiency)
        problems += [f"host cost '{k}': not a node kind; use one of {', '.join(HOST_KINDS)}"
                     for k in self.host_costs if k not in HOST_KINDS]
        problems += [f"host cost '{k}': {c} is negative or not finite; give seconds >= 0"
                     for k, c in self.host_costs.items()
                     if not (0 <= c.seconds < math.inf and 0 <= c.per_byte < math.inf)]
        if not problems:
            self._build()
            problems = self._connectivity_problems()
        if problems:
            raise MachineModelError(f"machine '{name}': {len(problems)} problem"
                                    f"{'s' if len(problems) > 1 else ''}:\n  - " +
                                    "\n  - ".join(problems))
        self._routes: Routes | None = None        # made on the first route asked for
        self._symmetry: NodeSymmetry | None = None   # with it, when the nodes repeat
        # collectives.py's caches: candidates per group, group per device list as given,
        # (name, seconds) per (group, nbytes)
        self._collectives: dict[tuple[int, ...], dict] = {}
        self._groups: dict[tuple, tuple[int, ...]] = {}
        self._allreduce_memo: dict[tuple, tuple[str, float]] = {}

    # -- structure ------------------------------------------------------------------------
    def _build(self) -> None:
        self._node_of, self._first, names = [], [], []
        for i, t in enumerate(self.nodes):
            self._first.append(len(names))
            for k in range(len(self.node_types[t].devices)):
                names.append(f"n{i}/d{k}")
                self._node_of.append(i)
        self._first.append(len(names))
        self._kinds = [self.node_types[t].devices[k] for t in self.nodes
                       for k in range(len(self.node_types[t].devices))]
        for i, t in enumerate(self.nodes):
            names += [f"n{i}/{p}" for p in self.node_types[t].points]
        names += list(self.switches)
        self._vertex = {n: v for v, n in enumerate(names)}
        self._names = names
        self._adj: list[list[tuple[int, Link]]] = [[] for _ in names]
        self._resources: dict[str, Link] = {}
        # per node its links in declaration order, and a node link's (node, index) by name:
        # what symmetry.py renames routes with
        self._node_links: list[list[Link]] = []
        self._link_place: dict[str, tuple[int, int]] = {}
        for i, t in enumerate(self.nodes):
            self._node_links.append([])
            for ls in self.node_types[t].links:
                full = tuple(e if e in self.switches else f"n{i}/{e}" for e in ls.ends)
                self._add(f"n{i}/{ls.name or '-'.join(ls.ends)}", ls, full, i)
        for ls in self.links:
            self._add(ls.name or "-".join(ls.ends), ls, ls.ends)
        self._resource_order = {name: k for k, name in enumerate(self._resources)}

    def _add(self, base: str, ls: LinkSpec, ends, node: int = -1) -> None:
        a, b = (self._vertex[e] for e in ends)
        if ls.duplex:
            fwd = Link(base + ">", ls.kind, ls.latency, ls.bandwidth, ends[0], ends[1])
            rev = Link(base + "<", ls.kind, ls.latency, ls.bandwidth, ends[1], ends[0])
        else:
            fwd = rev = Link(base, ls.kind, ls.latency, ls.bandwidth, ends[0], ends[1])
        for link in {fwd.name: fwd, rev.name: rev}.values():
            if link.name in self._resources:
                raise MachineModelError(
                    f"machine '{self.name}': two links are named '{link.name}'; give one of "
                    "them another \"name\"")
            self._resources[link.name] = link
            if node >= 0:
                self._link_place[link.name] = (node, len(self._node_links[node]))
                self._node_links[node].append(link)
        self._adj[a].append((b, fwd))
        self._adj[b].append((a, rev))

    def _connectivity_problems(self) -> list[str]:
        # Components of the graph without devices; devices reach each other through a shared
        # component or a direct link (routes never pass through a third device).
        n_dev = self.num_devices
        parent = list(range(len(self._names)))

        def find(v):
            while parent[v] != v:
                parent[v] = parent[parent[v]]
                v = parent[v]
            return v
        for v in range(n_dev, len(self._names)):
            for w, _ in self._adj[v]:
                if w >= n_dev:
                    parent[find(v)] = find(w)
        touch = [{find(w) for w, _ in self._adj[d] if w >= n_dev} for d in range(n_dev)]
        direct = [{w for w, _ in self._adj[d] if w < n_dev} for d in range(n_dev)]
        common = set.intersection(*touch) if touch else set()
        if common:
            return []
        for a in range(n_dev):
            for b in range(a + 1, n_dev):
                if b not in direct[a] and not touch[a] & touch[b]:
                    return [f"no route from device {a} ({self._names[a]}) to device {b} "
                            f"({self._names[b]}); add a link between them or to a switch "
                            "both reach"]
        return []

    # -- devices and nodes ----------------------------------------------------------------
    @property
    def num_devices(self) -> int:
        return len(self._node_of)

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    @property
    def devices_per_node(self) -> int:
        """Devices of every node (nodes of different sizes: use devices_of_node)."""
        sizes = {len(self.node_types[t].devices) for t in self.nodes}
        if len(sizes) > 1:
            raise MachineModelError(f"machine '{self.name}': nodes hold {sorted(sizes)} "
                                    "devices; use devices_of_node(n) for nodes of "
                                    "different sizes")
        return sizes.pop()

    def devices_of_node(self, node: int) -> range:
        if not 0 <= node < self.num_nodes:
            raise MachineModelError(f"machine '{self.name}': node {node} does not exist; it "
                                    f"has nodes 0..{self.num_nodes - 1}")
        return range(self._first[node], self._first[node + 1])

    def _check_device(self, i) -> int:
        try:
            d = operator.index(i)
        except TypeError:
            d = -1
        if not 0 <= d < self.num_devices:
            raise MachineModelError(f"machine '{self.name}': device {i!r} does not exist; it "
                                    f"has devices 0..{self.num_devices - 1}")
        return d

    def device(self, i: int) -> DeviceSpec:
        return self.device_specs[self._kinds[self._check_device(i)]]

    def node_of(self, i: int) -> int:
        return self._node_of[self._check_device(i)]

    def device_name(self, i: int) -> str:
        """'n<node>/d<k>': the endpoint name of device i in files and link ends."""
        return self._names[self._check_device(i)]

    def host_resource(self, i: int) -> str:
        """The host thread that issues device i's work: one per device (one rank per
        device, as taskrt_machine() places them). The simulator uses a CPU device's compute
        resource instead: there the thread that issues a task also runs it."""
        return f"host {self.device_name(i)}"

    def with_host_costs(self, host_costs: Mapping[str, HostCost], calibration=None
                        ) -> "MachineModel":
        """This model with other host costs (and calibration record, if given)."""
        return MachineModel(self.name, self.device_specs, self.node_types, self.nodes,
                            self.switches, self.links, self.allreduce_efficiency, self.summary,
                            self.calibration if calibration is None else calibration,
                            host_costs)

    def link_resources(self) -> tuple[Link, ...]:
        """Every link resource (one per name), in declaration order."""
        return tuple(self._resources.values())

    # -- routes and transfers -------------------------------------------------------------
    def route(self, a: int, b: int) -> tuple[tuple[Link, ...], float, float]:
        """(links, total latency, slowest bandwidth) of a transfer from device a to b."""
        a, b = self._check_device(a), self._check_device(b)
        if a == b:
            return (), 0.0, math.inf
        if self._routes is None:
            self._routes = Routes(self._adj, self.num_devices)
            self._symmetry = NodeSymmetry.of(self)
        if self._symmetry is not None:
            return self._symmetry.route(a, b, self._routes)
        return self._routes.route(a, b)

    def path(self, a: int, b: int) -> tuple[Link, ...]:
        """The links a transfer from device a to device b occupies (empty when a == b)."""
        return self.route(a, b)[0]

    def transfer_time(self, nbytes: int, a: int, b: int) -> float:
        """Latency of the path plus nbytes over its slowest link; 0 when a == b."""
        if a == b:
            self._check_device(a)
            return 0.0
        _, latency, bandwidth = self.route(a, b)
        return latency + nbytes / bandwidth

    def transfer_line(self, a: int, b: int) -> tuple[tuple[Link, ...], float, float]:
        """(path(a, b), latency, bandwidth) with transfer_time(n, a, b) == latency + n /
        bandwidth exactly for every n when the path has links: what the simulator keeps per
        (source, destination) to time a copy of any size without a route lookup."""
        return self.route(a, b)

    # -- collectives (collectives.py) -----------------------------------------------------
    def allreduce_times(self, nbytes: int, devices: Iterable[int]) -> dict[str, float]:
        """Seconds of each applicable algorithm: 'ring', 'hierarchical', 'tree'."""
        from .collectives import allreduce_times
        return allreduce_times(self, nbytes, devices)

    def allreduce_algorithm(self, nbytes: int, devices: Iterable[int]) -> tuple[str, float]:
        """(name, seconds) of the cheapest all-reduce algorithm for this group and size."""
        from .collectives import allreduce_algorithm
        return allreduce_algorithm(self, nbytes, devices)

    def allreduce_time(self, nbytes: int, devices: Iterable[int]) -> float:
        """Seconds of an all-reduce of nbytes over the devices, by the cheapest algorithm."""
        return self.allreduce_algorithm(nbytes, devices)[1]

    def links_of_allreduce(self, devices: Iterable[int], nbytes: int | None = None
                           ) -> tuple[Link, ...]:
        """Links the all-reduce occupies: of the algorithm chosen for nbytes, or of every
        candidate algorithm when nbytes is None."""
        from .collectives import links_of_allreduce
        return links_of_allreduce(self, devices, nbytes)

    # -- runtime view, files, printing ----------------------------------------------------
    def taskrt_machine(self, ranks_per_node: int | None = None):
        """The taskrt.Machine with the same devices (same ids): one rank per device by
        default, else `ranks_per_node` ranks per node sharing its devices in order."""
        from taskrt.machine import Device, Machine
        devices, rank = [], 0
        for node in range(self.num_nodes):
            ids = self.devices_of_node(node)
            ranks = len(ids) if ranks_per_node is None else ranks_per_node
            if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1 \
                    or len(ids) % ranks:
                raise MachineModelError(
                    f"machine '{self.name}': ranks_per_node={ranks_per_node!r} does not "
                    f"divide the {len(ids)} devices of node {node}; use a divisor of "
                    f"{len(ids)}")
            per_rank = len(ids) // ranks
            for k, d in enumerate(ids):
                gpu = self._kinds[d] != "cpu"
                devices.append(Device(d, rank + k // per_rank, "cuda" if gpu else "cpu",
                                      k if gpu else k % per_rank))
            rank += ranks
        return Machine(tuple(devices))

    def save(self, path) -> None:
        """Write this model to a machine file (JSON for .json, else msgpack)."""
        from .fileformat import save
        save(self, path)

    def _key(self) -> tuple:
        return (self.name, self.device_specs, self.node_types, self.nodes, self.switches,
                self.links, self.allreduce_efficiency, self.summary, self.calibration,
                self.host_costs)

    def __eq__(self, other) -> bool:
        return isinstance(other, MachineModel) and self._key() == other._key()

    __hash__ = None

    def __str__(self) -> str:
        kinds = sorted(set(self._kinds))
        summary = self.summary or self._auto_summary()
        sizes = {len(self.node_types[t].devices) for t in self.nodes}
        if len(sizes) == 1 and len(kinds) == 1:
            return f"{self.num_nodes}x{sizes.pop()} {kinds[0]} ({summary})"
        return (f"{self.num_devices} devices ({', '.join(kinds)}) on {self.num_nodes} nodes "
                f"({summary})")

    def _auto_summary(self) -> str:
        slowest: dict[str, float] = {}
        for link in self._resources.values():
            slowest[link.kind] = min(slowest.get(link.kind, math.inf), link.bandwidth)
        return ", ".join(f"{k} {bw / 1e9:.3g} GB/s" for k, bw in slowest.items()) or "no links"

    def __repr__(self) -> str:
        return f"MachineModel({self.name!r}: {self})"
