"""What the simulator needs of one launch's read nodes on one region (a read node group,
taskrt/nodegroups.py: the copies, reductions and all-reduces a launch's reads of the region
need), as arrays (strategy/delta.py's SimulationSession asks it for each new read group).

Most nodes a change makes are these (NMT @16: ~10k a simulation, against ~2k tasks), and
each is new (re-planning makes new nodes), so what a node's timing and buffers depend on is
computed once per such key, not per node:
  a copy       its duration, resources and host phases are functions of (source,
               destination, bytes) (NodeTimer.copy_timing; host_phases of the same);
               its buffers are the region's instance (or partial sums) on each side, or a
               staging buffer of its own on the destination (taskrt.bufferkeys.buffers_of),
               numbered with the group's others in one batch at its end;
  a reduce     its duration, resources and host phases are functions of (device, bytes
               moved, bytes) (NodeTimer.timing's memory time; host_phases); its buffers
               the region's instance on its device and per input the partial sums, the
               instance or the staging buffer of the copy behind it;
  all-reduces  (few) their timing per (devices, bytes), buffers once per node object.
A node's bytes are its rect's volume times the region's item size (Region.nbytes), read
without the property calls. tests/strategy/test_task_groups.py checks every group's arrays
against the timer and liveness node by node.
"""
from __future__ import annotations

from itertools import chain

import numpy as np

from taskrt.liveness import INSTANCE, PARTIAL, STAGING, buffers_of, own_bytes
from taskrt.taskgraph import ALLREDUCE, COPY, REDUCE

from .taskgroups import GroupSim, host_arrays, host_info

# Off: moved groups are read node by node too (the oracle of tests/strategy/
# test_moved_groups.py; the arrays are the same).
MOVED = True
RECIPES_KEPT = 4096       # template entries whose recipes ReadGroups keeps
_NO_READS = frozenset()           # a read group's nodes write no region (tasks do)
_I8 = np.int64


def _instance(known: dict, new_id, name: str, device: int) -> int:
    """The id of region `name`'s instance buffer on `device` (BufferTable.id)."""
    key = (INSTANCE, name, device, None)
    b = known.get(key)
    return new_id(key, 0) if b is None else b


class _Numbering:
    """The buffer numbering of an empty table (BufferTable's ids, id, add_staging): what
    _walk numbers a template's buffers by, without touching the session's table."""
    __slots__ = ("ids",)

    def __init__(self):
        self.ids: dict = {}

    def id(self, key, nbytes: int) -> int:
        return self.ids.setdefault(key, len(self.ids))

    def add_staging(self, keys: list, nbytes: list) -> int:
        first = len(self.ids)
        self.ids.update(zip(keys, range(first, first + len(keys))))
        return first


class ReadGroups:
    """Read groups' GroupSims for one SimulationSession's tables (its buffer ids and
    resource ids; made again when the session starts its tables again). Holds nothing of
    the session (a bound method of it would be a reference cycle: strategy/search.py)."""

    def __init__(self, timer, resources, buffers):
        self.timer, self.resources, self.buffers = timer, resources, buffers
        self.infos: dict = {}      # all-reduce node -> what it adds to its group (_node_info)
        self._copies: dict = {}    # (src, dst, bytes) -> (duration, resource ids, host)
        self._copy_resources: dict = {}   # (src, dst) -> a copy's resource ids
        self._reduces: dict = {}   # (device, bytes moved, bytes) -> (duration, ids, host)
        self._allreduces: dict = {}     # (devices, bytes) -> (duration, ids, host)
        # id(template entry) -> (the entry, _recipe of it): moved groups' shared arrays.
        self._recipes: dict = {}

    def _copy_timing(self, node, key) -> tuple:
        """(duration, resource ids, host phases with ids) of a copy with this (source,
        destination, bytes) `key` (the session's timer is a NodeTimer: its copy_timing is
        what timing() answers for the node)."""
        d, rs = self.timer.copy_timing(*key)
        # Its resources (the links of the path, or the device) depend on the devices only.
        ids = self._copy_resources.get(key[:2])
        if ids is None:
            rid = self.resources.id
            ids = self._copy_resources[key[:2]] = tuple([rid(x) for x in rs])
        got = self._copies[key] = (d, ids, host_info(self.timer, self.resources, node))
        return got

    def _reduce_timing(self, node, key) -> tuple:
        """(duration, resource ids, host phases with ids) of a reduce: functions of its
        (device, bytes moved, bytes) `key` (NodeTimer.timing and host_phases)."""
        got = self._reduces[key] = self._timing(node)
        return got

    def _node_info(self, node, staged) -> tuple:
        """((duration, resource ids, host phases), buffer ids) of another node (all-reduce),
        cached per node object (unchanged nodes are the same objects in the next graph).
        An all-reduce's timing is a function of its (devices, bytes) (NodeTimer.timing and
        host_phases: the collective's algorithm, links and time), kept per such key: a
        re-planned gradient's all-reduces are new nodes, mostly of known keys."""
        if node.kind is ALLREDUCE:
            key = (node.devices, node.nbytes)
            timing = self._allreduces.get(key)
            if timing is None:
                timing = self._allreduces[key] = self._timing(node)
        else:
            timing = self._timing(node)
        table = self.buffers
        bufs = tuple([table.id(key, own_bytes(key)) for key in buffers_of(node, staged=staged)])
        return timing, bufs

    def _timing(self, node) -> tuple:
        """(duration, resource ids, host phases with ids) of a node, from the timer."""
        d, rs = self.timer.timing(node)
        rid = self.resources.id
        return d, tuple([rid(x) for x in rs]), host_info(self.timer, self.resources, node)

    def sim(self, group) -> GroupSim:
        """The GroupSim of a read group: a group moved from a template entry's nodes
        (NodeGroup.template) by relabelling the template's (`_relabel`), else node by node
        (`_walk`)."""
        template = group.template
        if template is not None and MOVED and group.nodes:
            got = self._recipes.get(id(template))
            if got is None or got[0] is not template:
                if len(self._recipes) >= RECIPES_KEPT:
                    self._recipes = {}
                got = self._recipes[id(template)] = (template, self._recipe(template))
            if got[1] is not None:
                return self._relabel(group, got[1])
        return self._walk(group.nodes, group.staged)

    def _recipe(self, entry) -> tuple | None:
        """What a group moved from template entry `entry` (taskrt.movedreads.EntryMoves)
        shares with the template's nodes: its GroupSim but for buffer ids, and per buffer
        of it (numbered as _walk numbers them, from an empty table) its kind, device, the
        node a staging buffer belongs to (index in the group) and whether it waits for
        the group's batch (a reduction copy's own), with the buffer ids as indices into
        that list. None where the template has an all-reduce (asked node by node, cached
        per node) or a staging buffer of a node outside the group."""
        items = entry.items
        nodes = [item[0] for item in items]
        if any(node.kind is not COPY and node.kind is not REDUCE for node in nodes):
            return None
        staged = [item[2] for item in items]
        numbering = _Numbering()
        real, self.buffers = self.buffers, numbering
        try:
            sim = self._walk(nodes, staged if any(st is not None for st in staged) else None)
        finally:
            self.buffers = real
        at = {node: k for k, node in enumerate(nodes)}
        symbols = []
        for kind, _, device, node in numbering.ids:
            if node is None:
                symbols.append((kind, device, -1, 0, False))
                continue
            k = at.get(node)
            if k is None:
                return None
            own = node.kind is COPY and node.reduction and node.dst == device
            symbols.append((kind, device, k, own_bytes((kind, None, device, node)), own))
        # Most templates: the region's buffers, then only their reduction copies' own
        # staging buffers (numbered after the others, in one batch: _walk's order).
        n = sum(1 for x in symbols if x[2] < 0)
        regions, staging = symbols[:n], symbols[n:]
        simple = all(x[2] < 0 for x in regions) and all(x[4] for x in staging)
        return sim, symbols, (regions, [x[1] for x in staging], [x[2] for x in staging],
                              [x[3] for x in staging]) if simple else None

    def _relabel(self, group, recipe) -> GroupSim:
        """The GroupSim of a group moved from the recipe's template: its durations,
        resources and host phases, and its buffer ids with each of the template's buffers
        replaced by the group's (its region's, its nodes' staging buffers), numbered where
        new in the order _walk would number them."""
        sim, symbols, simple = recipe
        name, nodes = group.nodes[0].region.name, group.nodes
        known, new_id = self.buffers.ids, self.buffers.id
        if simple is not None:
            regions, devices, at, nbytes = simple
            ids = []
            for kind, device, _, _, _ in regions:
                key = (kind, name, device, None)
                b = known.get(key)
                ids.append(new_id(key, 0) if b is None else b)
            if at:
                keys = [(STAGING, name, d, nodes[k]) for d, k in zip(devices, at)]
                if any(map(known.__contains__, keys)):      # (numbered before: rare)
                    simple = None
                else:
                    first = self.buffers.add_staging(keys, nbytes)
                    ids += range(first, first + len(keys))
        if simple is None:
            ids = self._relabelled_ids(name, nodes, symbols)
        buf_ids = np.array(ids, dtype=_I8)[sim.buf_ids] if len(sim.buf_ids) else sim.buf_ids
        return GroupSim(sim.dur, sim.res_counts, sim.res_ids, sim.buf_counts, buf_ids,
                        _NO_READS, {}, sim.host)

    def _relabelled_ids(self, name: str, nodes: list, symbols: list) -> list:
        """_relabel's buffer ids of the group's own buffers, symbol by symbol."""
        known, new_id = self.buffers.ids, self.buffers.id
        ids = [0] * len(symbols)
        pending, pending_bytes, pending_at = [], [], []
        for s, (kind, device, k, nbytes, own) in enumerate(symbols):
            key = (kind, name, device, None if k < 0 else nodes[k])
            b = known.get(key)
            if b is None:
                if own:
                    pending.append(key)
                    pending_bytes.append(nbytes)
                    pending_at.append(s)
                    continue
                b = new_id(key, nbytes)
            ids[s] = b
        if pending:
            first = self.buffers.add_staging(pending, pending_bytes)
            for j, s in enumerate(pending_at):
                ids[s] = first + j
        return ids

    def _walk(self, nodes: list, staged) -> GroupSim:
        """A read group's GroupSim node by node in one loop: per node its timing tuple
        (duration, resource ids, host phases; shared by the nodes of one key) and its
        buffer ids, the arrays made from those lists at the end by C loops."""
        copies, reduces, infos = self._copies, self._reduces, self.infos
        known, new_id = self.buffers.ids, self.buffers.id
        times, buf_ids = [], []
        append, add = times.append, buf_ids.append
        buf_counts = [2] * len(nodes)
        # The group's new staging buffers (its reduction copies'), numbered in one batch at
        # the end (BufferTable.add_staging): key -> -1 - its index here until then.
        pending: dict = {}
        pending_bytes: list = []
        region = itemsize = None
        for k, node in enumerate(nodes):
            kind = node.kind
            if node.region is not region:
                region = node.region
                name, itemsize = region.name, region.itemsize
                inst: dict = {}       # device -> id of buffer (INSTANCE, name, device, None)
            if kind is COPY:
                src, dst, nbytes = node.src, node.dst, node.rect.volume * itemsize
                t = copies.get((src, dst, nbytes))
                if t is None:
                    t = self._copy_timing(node, (src, dst, nbytes))
                append(t)
                if node.reduction:               # the staging buffer is the node's own
                    if node.from_partial:
                        key = (PARTIAL, name, src, None)
                        a = known.get(key)
                        if a is None:
                            a = new_id(key, 0)
                    else:
                        a = inst.get(src)
                        if a is None:
                            a = inst[src] = _instance(known, new_id, name, src)
                    key = (STAGING, name, dst, node)
                    b = known.get(key)
                    if b is None:
                        b = pending.get(key)
                        if b is None:
                            b = pending[key] = -1 - len(pending)
                            pending_bytes.append(nbytes)
                else:
                    a = inst.get(src)
                    if a is None:
                        a = inst[src] = _instance(known, new_id, name, src)
                    b = inst.get(dst)
                    if b is None:
                        b = inst[dst] = _instance(known, new_id, name, dst)
                add(a)
                add(b)
            elif kind is REDUCE:
                dev, inputs = node.device, node.inputs
                vol = node.rect.volume
                moved = vol
                for inp in inputs:
                    moved += inp.rect.volume
                t = reduces.get((dev, moved * itemsize, vol * itemsize))
                if t is None:
                    t = self._reduce_timing(node, (dev, moved * itemsize, vol * itemsize))
                append(t)
                # buffers_of's keys, each once, in order: the instance, then per input
                a = inst.get(dev)
                if a is None:
                    a = inst[dev] = _instance(known, new_id, name, dev)
                mine, seen = [a], {a}
                for j, inp in enumerate(inputs):
                    source = inp.source
                    if source == "staged":          # (the group records the copy)
                        key = (STAGING, name, dev, staged[k][j])
                    else:
                        key = (PARTIAL if source == "partial" else INSTANCE, name, dev, None)
                    b = known.get(key)
                    if b is None:
                        b = pending.get(key)
                        if b is None:
                            b = new_id(key, own_bytes(key))
                    if b not in seen:
                        seen.add(b)
                        mine.append(b)
                buf_counts[k] = len(mine)
                buf_ids.extend(mine)
            else:
                info = infos.get(node)
                if info is None:
                    info = infos[node] = self._node_info(
                        node, None if staged is None else staged[k])
                append(info[0])
                buf_counts[k] = len(info[1])
                buf_ids.extend(info[1])
        n = len(nodes)
        dur, res, hosts = zip(*times) if n else ((), (), ())
        buf_ids = np.array(buf_ids, dtype=_I8)
        if pending:
            first = self.buffers.add_staging(list(pending), pending_bytes)
            new = buf_ids < 0
            buf_ids[new] = first - 1 - buf_ids[new]
        return GroupSim(np.array(dur, dtype=np.float64),
                        np.fromiter(map(len, res), dtype=_I8, count=n),
                        np.fromiter(chain.from_iterable(res), dtype=_I8),
                        np.array(buf_counts, dtype=_I8), buf_ids, _NO_READS, {},
                        host_arrays(hosts) if self.timer.host_costs else None)
