"""All-reduce costs on a MachineModel: ring, binary tree and hierarchical, each timed over the
links it really uses (shared links counted), and the cheapest one chosen.

An algorithm is a sequence of stages; a stage is a set of parts that run at the same time
(the slowest part sets the stage's time); a part is `rounds` rounds in each of which every
(src, dst) pair of the part sends `frac * nbytes` at once. One round takes

    max latency of the pairs' paths + frac * nbytes * max over links (pairs on it / bandwidth)

with the bandwidth term divided by the model's `allreduce_efficiency` (1.0 for presets; fitted
by calibration). So a ring over k devices whose slowest link has bandwidth B (no link shared
by two hops) and whose slowest hop has latency L costs 2(k-1) L + 2(k-1)/k nbytes / B.

- ring: devices in id order (node by node), reduce-scatter then all-gather: 2(k-1) rounds
  of nbytes/k.
- tree: binary tree in id order (device i's parent is (i-1)//2 in the group): reduce up,
  level by level, then broadcast down, whole messages: 2 * depth rounds of nbytes.
- hierarchical (groups on several nodes with some node holding two or more): ring
  reduce-scatter inside every node, then ring all-reduces across nodes of each node's
  shards (the r-th members of the nodes form ring r; shards of nbytes/m for m members per
  node, the smallest node setting m), then ring all-gather inside every node.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable

ORDER = ("ring", "hierarchical", "tree")     # preference when two algorithms tie


@dataclass(frozen=True, slots=True)
class _Part:
    rounds: int
    latency: float               # seconds per round
    seconds_per_byte: float      # per byte of the round's message, before efficiency
    frac: float                  # the round's message as a fraction of nbytes
    links: frozenset             # names of the links used


def _part(model, pairs, rounds: int, frac: float) -> _Part:
    load: Counter = Counter()
    bandwidth, latency = {}, 0.0
    for a, b in pairs:
        links, lat, _ = model.route(a, b)
        latency = max(latency, lat)
        for link in links:
            load[link.name] += 1
            bandwidth[link.name] = link.bandwidth
    spb = max((n / bandwidth[i] for i, n in load.items()), default=0.0)
    return _Part(rounds, latency, spb, frac, frozenset(load))


def _ring_pairs(group):
    k = len(group)
    return [(group[i], group[(i + 1) % k]) for i in range(k)]


def _candidates(model, group: tuple[int, ...], by_source: bool = True
                ) -> dict[str, list[list[_Part]]]:
    """Every algorithm's stages for `group`. `by_source`: find all their routes first,
    source by source (below); False asks for them in the algorithms' order (the test's
    oracle: the same routes, so the same parts)."""
    k = len(group)
    ring = _ring_pairs(group)
    # tree: heap layout; level d holds positions 2^d-1 .. 2^(d+1)-2
    levels, d = [], 1
    while (1 << d) - 1 < k:
        kids = range((1 << d) - 1, min((1 << (d + 1)) - 1, k))
        levels.append([(group[i], group[(i - 1) // 2]) for i in kids])
        d += 1
    by_node: dict[int, list[int]] = {}
    for dev in group:
        by_node.setdefault(model.node_of(dev), []).append(dev)
    members = list(by_node.values())
    hierarchical = len(members) > 1 and max(len(m) for m in members) > 1
    if hierarchical:
        m_min = min(len(m) for m in members)
        rings = [[m[r] for m in members] for r in range(m_min)]
        across_pairs = [p for r in rings for p in _ring_pairs(r)]
    if by_source:
        # A route is a function of its two ends alone (routes.py), but routes.py keeps only
        # the searches of its last sources (as many as fit KEPT_BYTES): asked in the
        # algorithms' order (the ring, the tree's levels up and down, the rings across
        # nodes) a source's search was made again and again (3,645 searches for 1,024
        # devices, where 1,024 sources would do). Asked source by source, each search is
        # made once.
        wanted = set(ring)
        for level in levels:
            wanted.update(level)
            wanted.update((b, a) for a, b in level)
        if hierarchical:
            for m in members:
                if len(m) > 1:
                    wanted.update(_ring_pairs(m))
            wanted.update(across_pairs)
        for a, b in sorted(wanted):
            model.route(a, b)
    out = {"ring": [[_part(model, ring, 2 * (k - 1), 1 / k)]]}
    up = [[_part(model, pairs, 1, 1.0)] for pairs in reversed(levels)]
    down = [[_part(model, [(b, a) for a, b in pairs], 1, 1.0)] for pairs in levels]
    out["tree"] = up + down
    if hierarchical:
        inside = [_part(model, _ring_pairs(m), len(m) - 1, 1 / len(m))
                  for m in members if len(m) > 1]
        across = _part(model, across_pairs, 2 * (len(members) - 1),
                       1 / (m_min * len(members)))
        out["hierarchical"] = [inside, [across], inside]
    return out


def _group(model, devices: Iterable[int]) -> tuple[int, ...]:
    key = devices if isinstance(devices, tuple) else tuple(devices)
    group = model._groups.get(key)
    if group is None:
        group = tuple(sorted({model._check_device(d) for d in key}))
        if len(group) > 1 and group not in model._collectives:
            model._collectives[group] = _candidates(model, group)
        model._groups[key] = group
    return group


def _seconds(stages, nbytes: float, efficiency: float) -> float:
    return sum(max(p.rounds * (p.latency + p.seconds_per_byte * p.frac * nbytes / efficiency)
                   for p in stage) for stage in stages)


def allreduce_times(model, nbytes: int, devices: Iterable[int]) -> dict[str, float]:
    """Seconds of each applicable algorithm; {} for a group of one device."""
    group = _group(model, devices)
    if len(group) < 2:
        return {}
    cands = model._collectives[group]
    return {name: _seconds(cands[name], nbytes, model.allreduce_efficiency)
            for name in ORDER if name in cands}


def allreduce_algorithm(model, nbytes: int, devices: Iterable[int]) -> tuple[str, float]:
    """(name, seconds) of the cheapest algorithm; ('none', 0.0) for one device."""
    group = _group(model, devices)
    memo = model._allreduce_memo.get((group, nbytes))
    if memo is None:
        times = allreduce_times(model, nbytes, group)
        best = min(times.values(), default=0.0)
        name = next((n for n in ORDER if times.get(n) == best), "none")
        memo = model._allreduce_memo[(group, nbytes)] = (name, best)
    return memo


def links_of_allreduce(model, devices: Iterable[int], nbytes: int | None = None):
    """Links of the algorithm chosen for nbytes, or of all candidates (nbytes None)."""
    group = _group(model, devices)
    if len(group) < 2:
        return ()
    cands = model._collectives[group]
    which = "all" if nbytes is None else allreduce_algorithm(model, nbytes, group)[0]
    cache = cands.setdefault("links", {})
    if which not in cache:
        names = set()
        for algorithm in (ORDER if which == "all" else (which,)):
            for stage in cands.get(algorithm, ()):
                for part in stage:
                    names |= part.links
        # in declaration order (sorted by place: not a pass over every link of the machine
        # per group, 6,144 at 1,024 H100s)
        order, resources = model._resource_order, model._resources
        cache[which] = tuple(resources[name] for name in sorted(names, key=order.__getitem__))
    return cache[which]
