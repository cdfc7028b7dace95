"""The planner: dependence analysis and coherence over a sequence of launches -> TaskGraph.

Model. Each (region, device) has one physical instance (and, for Red+ requirements, one
partial-sum buffer). Per region we track
  valid:   disjoint pieces (rect, holder devices) whose instances hold the current value
           (where partial sums are pending, they hold the base the sums are added to);
  pending: partial sums (rect, (device, in partial buffer?)) not yet reduced; disjoint per
           device. Sums start in the device's instance where the region has no value (a
           gradient), so a sum that only its own device reads needs no node at all; where a
           value exists they go to a separate partial buffer, since the value is their base.
Per physical buffer we track the last writer and the readers since, per piece, which gives
exactly the true dependences: RAW, WAR, WAW on the same buffer and overlapping rects. Tasks
on different devices never share a buffer; data flows between them through copy nodes.
Two Red+ tasks on one device into overlapping rects are ordered (program order), so sums
are bit-identical run to run.

Per launch, in three steps:
  Step 1: reads. Pending partial sums under a read rect are reduced: one all-reduce when the
          devices reading exactly that rect are exactly the contributors and each holds a
          full partial of it (and there is no base), else a reduce on the first reader
          (reduction copies in, then a ReduceNode). Then copies bring every piece a reader
          lacks from a valid holder (same rank preferred, then the lowest device id).
  Step 2: one TaskNode per point, with edges from the buffers' earlier accesses; its writes
          make it the only holder, its Red+ requirements add pending partial sums.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Mapping, Sequence

from .errors import MappingError, PlanError, PrivilegeError
from .geometry import Rect, subtract_all
from .launch import IndexLaunch
from .machine import DefaultMapper, Machine, Mapper
from .privilege import Privilege
from .rectindex import RectIndex
from .region import Region
from .taskgraph import (AllReduceNode, CopyNode, ReduceInput, ReduceNode, TaskGraph,
                        TaskNode)

_R, _WD, _RW, _RED = (Privilege.READ, Privilege.WRITE_DISCARD, Privilege.READ_WRITE,
                      Privilege.REDUCE_SUM)


class _Buffer:
    """Accesses of one physical buffer: the last writer per piece and the readers since."""
    __slots__ = ("writers", "readers")

    def __init__(self):
        self.writers = RectIndex()
        self.readers = RectIndex()

    def read(self, rect: Rect, node: int) -> set[int]:
        preds = {n for _, _, n in self.writers.overlapping(rect)}
        self.readers.add(rect, node)
        return preds

    def write(self, rect: Rect, node: int | None) -> set[int]:
        preds = set()
        for index in (self.writers, self.readers):
            for i, r, n in index.overlapping(rect):
                preds.add(n)
                index.remove(i)
                for piece in r.subtract(rect):
                    index.add(piece, n)
        self.writers.add(rect, node)
        preds.discard(node)
        return preds


class _RegionState:
    __slots__ = ("region", "valid", "pending")

    def __init__(self, region: Region):
        self.region = region
        self.valid = RectIndex()      # (rect, frozenset of holder devices), disjoint
        self.pending = RectIndex()    # (rect, (device, in partial buffer?)), disjoint per device

    def add_holder(self, rect: Rect, device: int) -> None:
        """Record that `device` now also holds the current value of `rect`."""
        covered = []
        for i, r, holders in self.valid.overlapping(rect):
            inter = r.intersect(rect)
            covered.append(inter)
            if device in holders:
                continue
            self.valid.remove(i)
            for piece in r.subtract(rect):
                self.valid.add(piece, holders)
            self.valid.add(inter, holders | {device})
        rest = [rect]
        for c in covered:
            rest = [p for q in rest for p in q.subtract(c)]
        for piece in rest:
            self.valid.add(piece, frozenset((device,)))

    def set_only_holder(self, rect: Rect, devices: Iterable[int]) -> None:
        for i, r, holders in self.valid.overlapping(rect):
            self.valid.remove(i)
            for piece in r.subtract(rect):
                self.valid.add(piece, holders)
        self.valid.add(rect, frozenset(devices))

    def retire_pending(self, rect: Rect) -> None:
        for i, r, dev in self.pending.overlapping(rect):
            self.pending.remove(i)
            for piece in r.subtract(rect):
                self.pending.add(piece, dev)


class Planner:
    """Turns launches into a TaskGraph. Use `plan()` for the common case."""

    def __init__(self, machine: Machine, mapper: Mapper | None = None,
                 initial: Mapping[Region, Iterable[tuple[Rect, int]]] | None = None):
        self.machine = machine
        self.mapper = mapper or DefaultMapper(machine)
        self.graph = TaskGraph(machine)
        self.states: dict[str, _RegionState] = {}
        self.buffers: dict[tuple[str, int, bool], _Buffer] = {}
        self.launches: dict[str, IndexLaunch] = {}
        self.point_nodes: dict[str, dict[tuple[int, ...], TaskNode]] = {}
        for region, pieces in (initial or {}).items():
            self._declare_initial(region, pieces)

    # -- bookkeeping ---------------------------------------------------------------------
    def _state(self, region: Region) -> _RegionState:
        st = self.states.get(region.name)
        if st is None:
            self.graph.regions[region.name] = region
            st = self.states[region.name] = _RegionState(region)
        elif st.region is not region and st.region != region:
            known = st.region
            raise PlanError(f"Region '{region.name}' is declared twice with different "
                            f"shapes or dtypes ({known.shape} {known.dtype} vs "
                            f"{region.shape} {region.dtype}). Give regions unique names.")
        return st

    def _buffer(self, region: Region, device: int, partial: bool, rect: Rect) -> _Buffer:
        key = (region.name, device, partial)
        rects = self.graph.partial_rects if partial else self.graph.instance_rects
        old = rects.get(key[:2])
        rects[key[:2]] = rect if old is None else old.union_bbox(rect)
        buf = self.buffers.get(key)
        if buf is None:
            buf = self.buffers[key] = _Buffer()
        return buf

    def _declare_initial(self, region: Region, pieces: Iterable[tuple[Rect, int]]) -> None:
        st = self._state(region)
        out = self.graph.initial_valid.setdefault(region.name, [])
        for rect, device in pieces:
            self.machine[device]
            if not region.rect.contains(rect):
                raise PlanError(f"Initial data of '{region.name}': {rect} is outside the "
                                f"region {region.rect}.")
            self._buffer(region, device, False, rect).write(rect, None)
            st.add_holder(rect, device)
            out.append((rect, (device,)))

    def _add(self, node, preds) -> None:
        self.graph.add(node, preds)

    def _next_id(self) -> int:
        return len(self.graph.nodes)

    # -- the three steps -----------------------------------------------------------------
    def add_launch(self, launch: IndexLaunch) -> None:
        if launch.name in self.launches:
            raise PlanError(f"Launch '{launch.name}' added twice. Give launches unique names.")
        self.launches[launch.name] = launch
        points = self._expand(launch)
        self._check_interference(launch, points)

        # Step 1: reads -- reduce pending partial sums, then copy in missing pieces.
        readers: dict[str, list[tuple[tuple, int, Rect]]] = defaultdict(list)
        for color, device, reqs in points:
            for req in reqs:
                if req.privilege.reads:
                    readers[req.region.name].append((color, device, req.rect))
        for name, rs in readers.items():
            st = self.states[name]
            if len(st.pending):
                self._reduce_for_reads(launch, st, rs)
            for color, device, rect in rs:
                self._copy_in(launch, st, color, device, rect)

        # Step 2: the point tasks, and the coherence changes their writes make. (Points of
        # one launch never overlap a rect another point reads, so order within it is free.)
        nodes = self.point_nodes[launch.name] = {}
        replica_writes: set = set()
        for color, device, reqs in points:
            nid = self._next_id()
            preds: set[int] = set()
            targets_of = []
            for req in reqs:
                reg, rect, priv = req.region, req.rect, req.privilege
                st = self.states[reg.name]
                if priv.reads:
                    preds |= self._buffer(reg, device, False, rect).read(rect, nid)
                if priv.writes:
                    preds |= self._buffer(reg, device, False, rect).write(rect, nid)
                    st.retire_pending(rect)
                    if launch.replicas and (reg.name, rect) in replica_writes:
                        st.add_holder(rect, device)
                    else:
                        st.set_only_holder(rect, (device,))
                        replica_writes.add((reg.name, rect))
                    targets_of.append(None)
                elif priv is _RED:
                    targets = self._reduce_targets(st, device, rect)
                    for piece, partial, _ in targets:
                        preds |= self._buffer(reg, device, partial, piece).write(piece, nid)
                    targets_of.append(targets)
                else:
                    targets_of.append(None)
            if launch.state_from is not None:
                preds.add(self._state_source(launch, color, device))
            node = TaskNode(nid, launch, color, device, reqs, tuple(targets_of))
            self._add(node, preds)
            nodes[color] = node

    @staticmethod
    def _reduce_targets(st: _RegionState, device: int, rect: Rect) -> tuple:
        """Where a Red+ contribution of `device` to `rect` goes, piece by piece:
        (piece, in the partial buffer?, accumulate?). Pieces already holding partial sums on
        this device accumulate there. New pieces go straight into the device's instance when
        the region has no value there (a gradient: the sum starts from nothing), and into
        the partial buffer where a value exists (it is the base the sums are added to)."""
        targets, rest = [], [rect]
        for _, held, (d, partial) in st.pending.overlapping(rect):
            if d == device:
                targets.append((held.intersect(rect), partial, True))
                rest = [p for q in rest for p in q.subtract(held)]
        for q in rest:
            based = [r.intersect(q) for _, r, _ in st.valid.overlapping(q)]
            unbased = subtract_all(q, based)
            if not unbased:
                # All of q has a value: one piece, however fragmented the value's holders
                # are (each pending piece becomes its own reduction copy).
                based = [q]
            for piece in based:
                targets.append((piece, True, False))
            for piece in unbased:
                targets.append((piece, False, False))
        for piece, partial, accumulate in targets:
            if not accumulate:
                st.pending.add(piece, (device, partial))
        return tuple(targets)

    def _expand(self, launch: IndexLaunch):
        points = []
        for index, color in enumerate(launch.colors):
            reqs = launch.requirements(color)
            device = self.mapper.map_task(launch, color, index)
            if not (isinstance(device, int) and 0 <= device < len(self.machine.devices)):
                raise MappingError(f"Launch '{launch.name}' point {color}: mapped to device "
                                   f"{device}, which does not exist on {self.machine}. Use a "
                                   f"device id in 0..{len(self.machine.devices) - 1}.")
            for req in reqs:
                self._state(req.region)
            points.append((color, device, reqs))
        return points

    def _check_interference(self, launch: IndexLaunch, points) -> None:
        """Requirements of one launch may share a rect only when both read or both reduce
        (also within one point: a tensor used twice gets two gradient contributions), or, in a
        launch of replicas, when they write the same rect on different devices."""
        seen: dict[str, RectIndex] = defaultdict(RectIndex)
        for color, device, reqs in points:
            for k, req in enumerate(reqs):
                for _, r, (c2, d2, p2) in seen[req.region.name].overlapping(req.rect):
                    p1 = req.privilege
                    if (p1 is _R and p2 is _R) or (p1 is _RED and p2 is _RED):
                        continue
                    if launch.replicas and c2 != color and d2 != device and r == req.rect \
                            and p1 is p2:
                        continue
                    where = "requirements" if c2 == color else "points"
                    raise PrivilegeError(
                        f"Launch '{launch.name}': {where} {c2} ({p2.value}) and {color} "
                        f"({p1.value}) both touch '{req.region.name}' at "
                        f"{r.intersect(req.rect)}. Points of one launch may overlap only "
                        "when both read or both reduce; split the launch or the rects.")
                seen[req.region.name].add(req.rect, (color, device, req.privilege))

    def _state_source(self, launch: IndexLaunch, color, device: int) -> int:
        src = self.point_nodes.get(launch.state_from)
        if src is None:
            raise PlanError(f"Launch '{launch.name}': state_from='{launch.state_from}' names "
                            "no earlier launch. Add that launch first.")
        node = src.get(color)
        if node is None:
            raise PlanError(f"Launch '{launch.name}' point {color}: launch "
                            f"'{launch.state_from}' has no such point to take state from.")
        if node.device != device:
            raise MappingError(f"Launch '{launch.name}' point {color} is on device {device} but "
                               f"its state is on device {node.device} (from "
                               f"'{launch.state_from}'). Map both launches' points alike.")
        return node.id

    def _copy_in(self, launch, st: _RegionState, color, device: int, rect: Rect) -> None:
        region = st.region
        covered = 0
        for _, r, holders in st.valid.overlapping(rect):
            piece = r.intersect(rect)
            covered += piece.volume
            if device in holders:
                continue
            src = self._choose_source(holders, device)
            self._copy(launch.name, region, piece, src, device)
            st.add_holder(piece, device)
        if covered != rect.volume:
            raise PlanError(f"Launch '{launch.name}' point {color} on device {device} reads "
                            f"'{region.name}'{rect}, but only {covered} of its {rect.volume} "
                            "elements were ever written. Write the region first, or declare "
                            "it as initial data of the plan.")

    def _choose_source(self, holders, device: int) -> int:
        rank = self.machine.devices[device].rank
        same = [h for h in holders if self.machine.devices[h].rank == rank]
        return min(same) if same else min(holders)

    def _copy(self, owner: str, region: Region, rect: Rect, src: int, dst: int,
              reduction: bool = False, from_partial: bool = False) -> int:
        """A copy into dst's instance, or (reduction) of src's partial sums, held in its
        partial buffer or its instance, into a staging buffer on dst."""
        nid = self._next_id()
        preds = set()
        if reduction:
            preds |= self._buffer(region, src, from_partial, rect).read(rect, nid)
        else:
            preds |= self._buffer(region, src, False, rect).read(rect, nid)
            preds |= self._buffer(region, dst, False, rect).write(rect, nid)
        self._add(CopyNode(nid, owner, region, rect, src, dst, reduction, from_partial), preds)
        return nid

    def _reduce_for_reads(self, launch, st: _RegionState, reads) -> None:
        by_rect: dict[Rect, list[int]] = {}
        for _, device, rect in reads:
            devs = by_rect.setdefault(rect, [])
            if device not in devs:
                devs.append(device)
        for rect, devices in by_rect.items():
            contribs = st.pending.overlapping(rect)
            if not contribs:
                continue
            if self._is_allreduce(st, rect, devices, contribs):
                self._allreduce(launch.name, st, rect, sorted(devices), contribs)
            else:
                self._reduce_to(launch.name, st, rect, devices[0], contribs)

    @staticmethod
    def _is_allreduce(st: _RegionState, rect: Rect, devices, contribs) -> bool:
        """Each reader holds a full partial of `rect` in one buffer, nobody else holds any,
        and there is no base value."""
        if len(devices) < 2 or st.valid.overlapping(rect):
            return False
        held = defaultdict(int)
        where = defaultdict(set)
        for _, r, (dev, partial) in contribs:
            held[dev] += r.intersect(rect).volume
            where[dev].add(partial)
        return set(held) == set(devices) and all(v == rect.volume for v in held.values()) \
            and all(len(w) == 1 for w in where.values())

    def _allreduce(self, owner: str, st: _RegionState, rect: Rect, devices, contribs) -> None:
        nid = self._next_id()
        preds = set()
        in_partial = {dev: partial for _, _, (dev, partial) in contribs}
        for d in devices:
            preds |= self._buffer(st.region, d, in_partial[d], rect).read(rect, nid)
            preds |= self._buffer(st.region, d, False, rect).write(rect, nid)
        self._add(AllReduceNode(nid, owner, st.region, rect, tuple(devices),
                                tuple(in_partial[d] for d in devices)), preds)
        st.retire_pending(rect)
        st.set_only_holder(rect, devices)

    def _reduce_to(self, owner: str, st: _RegionState, rect: Rect, device: int,
                   contribs) -> None:
        region = st.region
        base = st.valid.overlapping(rect)
        if not base and all(dev == device and not partial for _, _, (dev, partial) in contribs):
            # The sums are already in the reader's instance: nothing to run.
            self._mark_summed(st, rect, device, contribs)
            return
        inputs: list[tuple[int, ReduceInput]] = []
        # The base: the value the partial sums are added to, gathered onto `device`.
        for _, r, holders in base:
            piece = r.intersect(rect)
            if device not in holders:
                self._copy(owner, region, piece, self._choose_source(holders, device), device)
                st.add_holder(piece, device)
            inputs.append((-1, ReduceInput("instance", piece)))
        copy_preds = set()
        for _, r, (dev, partial) in sorted(contribs, key=lambda c: (c[2][0], c[1].lo)):
            piece = r.intersect(rect)
            if dev == device:
                inputs.append((dev, ReduceInput("partial" if partial else "instance", piece)))
            else:
                cid = self._copy(owner, region, piece, dev, device, reduction=True,
                                 from_partial=partial)
                copy_preds.add(cid)
                inputs.append((dev, ReduceInput("staged", piece, cid)))
        inputs.sort(key=lambda x: x[0])
        nid = self._next_id()
        preds = set(copy_preds)
        for _, inp in inputs:
            if inp.source == "instance":
                preds |= self._buffer(region, device, False, inp.rect).read(inp.rect, nid)
            elif inp.source == "partial":
                preds |= self._buffer(region, device, True, inp.rect).read(inp.rect, nid)
        preds |= self._buffer(region, device, False, rect).write(rect, nid)
        self._add(ReduceNode(nid, owner, region, rect, device, tuple(i for _, i in inputs)),
                  preds)
        self._mark_summed(st, rect, device, contribs)

    @staticmethod
    def _mark_summed(st: _RegionState, rect: Rect, device: int, contribs) -> None:
        st.retire_pending(rect)
        # Only where partial sums were added does `device` alone hold the result; the base
        # elsewhere is unchanged (its holders stay valid), and elements with neither base nor
        # partial sums stay unwritten, so reading them is still a PlanError.
        summed = RectIndex()
        for _, r, _ in contribs:
            done = [q for _, q, _ in summed.overlapping(r)]
            for piece in subtract_all(r.intersect(rect), done):
                summed.add(piece, None)
        for _, piece, _ in summed:
            st.set_only_holder(piece, (device,))

    # -- result ----------------------------------------------------------------------------
    def finish(self) -> TaskGraph:
        g = self.graph
        for name, st in self.states.items():
            g.final_valid[name] = sorted(((r, tuple(sorted(h))) for _, r, h in st.valid),
                                         key=lambda x: (x[0].lo, x[0].hi))
            pend = [(r, d, partial) for _, r, (d, partial) in st.pending]
            if pend:
                g.final_pending[name] = pend
        return g


def plan(launches: Sequence[IndexLaunch], machine: Machine, mapper: Mapper | None = None,
         initial: Mapping[Region, Iterable[tuple[Rect, int]]] | None = None) -> TaskGraph:
    """Plan launches, in program order, into a TaskGraph.

    `initial` says which (rect, device) pieces of which regions hold data before the first
    launch (inputs and weights); reading anything else before it is written is an error.
    """
    p = Planner(machine, mapper, initial)
    for launch in launches:
        p.add_launch(launch)
    return p.finish()
