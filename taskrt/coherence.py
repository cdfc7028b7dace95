"""Coherence and dependences of ONE region: the part of planning that never looks at
another region. The planner (planner.py) runs one RegionPlanner per region over the launches
that touch it and assembles their nodes into a TaskGraph; because regions are planned
independently, changing one operator's launches re-plans only the regions they touch.

Model. Each (region, device) has one physical instance (and, for Red+ requirements onto an
existing value, one partial-sum buffer). Per region we track
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

Nodes made here (copies, reduces, all-reduces) refer to their predecessors symbolically:
another node object of this region, a task reference (launch index, point index), or None
for "initial data"; the planner turns references into ids when it assembles the graph.
"""
from __future__ import annotations

from operator import itemgetter
from typing import Iterable

from .bufferaccesses import BufferAccesses
from .errors import PlanError
from .geometry import Rect, inside_test, merge_adjacent, subtract_all
from .holders import Holders
from .privilege import Privilege
from .pendingsums import LaunchSums, PendingSums
from .rectindex import RectIndex
from .reducedreads import is_allreduce, readers_hold
from .summedpieces import launch_summed
from .region import Region
from .taskgraph import AllReduceNode, CopyNode, ReduceInput, ReduceNode, ReduceTarget
from .validpieces import PieceState, SentCounts, copy_in_all

_R, _WD, _RW, _RED = (Privilege.READ, Privilege.WRITE_DISCARD, Privilege.READ_WRITE,
                      Privilege.REDUCE_SUM)
# The shortcuts below that do what the general code does with fewer calls (access_points'
# reads, _reduce_targets' first sum, _reduce_for_reads' known empty bases and sums apart);
# off only to compare the two (test_aligned_plans.py, test_launch_reductions.py).
FAST_PATHS = True
# A region's valid pieces as arrays and each launch's reads walked by one compiled call
# (validpieces.py, validindex.py's grid and holder rows), exact against the Python walk over a
# RectIndex (RegionState, _copy_in: off selects it; tests/taskrt/test_valid_pieces.py runs
# both). Read when a RegionPlanner is made. Measured: docs/design.md, "Simulator speed".
COMPILED_READS = True
_first = itemgetter(0)


class RegionState:
    """The coherence state over a RectIndex: with RegionPlanner._copy_in, the oracle that
    validpieces.PieceState (the state the planner uses, COMPILED_READS) is tested against."""
    __slots__ = ("region", "valid", "pending", "held")

    def __init__(self, region: Region):
        self.region = region
        # (rect, Holders: writer first; one per item); the grid when queries pay for it
        self.valid = RectIndex(disjoint=True, grid_on_demand=True)
        self.pending = PendingSums()  # (rect, (device, in partial buffer?)), disjoint per device
        # (device, rect) pairs known to hold the current value of all of rect: what a read
        # left. Holders are only added until some rect gets new only holders
        # (set_only_holder), which forgets them all.
        self.held: set[tuple[int, Rect]] = set()

    def valid_meets(self, rect: Rect) -> bool:
        """Whether a valid piece overlaps `rect`."""
        return bool(self.valid.overlapping(rect))

    def add_holder(self, rect: Rect, device: int) -> None:
        """Record that `device` now also holds the current value of `rect`."""
        covered, lacking = [], []
        for i, r, holders in self.valid.overlapping(rect):
            inter = r.intersect(rect)
            covered.append(inter)
            if device not in holders:
                lacking.append((i, r, inter, holders))
        self.add_holder_to(lacking, device)
        for piece in subtract_all(rect, covered):
            self.valid.add(piece, Holders((device,)))

    def add_holder_to(self, items, device: int) -> None:
        """add_holder for valid items [(id, rect, part of it, holders)] already found: each
        item's part gets `device` as a holder (what add_holder does without the query)."""
        valid = self.valid
        for i, r, part, holders in items:
            if part is r:                   # all of the item: it moves to the end as is
                holders.append(device)
                valid.renew(i)
                continue
            valid.remove(i)
            for piece in r.subtract(part):
                valid.add(piece, holders.copy())
            holders.append(device)
            valid.add(part, holders)

    def set_only_holder(self, rect: Rect, devices: Iterable[int]) -> None:
        self.held.clear()
        valid = self.valid
        found = valid.overlapping(rect)
        if len(found) == 1 and found[0][1] is rect:     # one piece, equal to rect
            valid.renew(found[0][0], Holders(devices))
            return
        for i, r, holders in found:
            valid.remove(i)
            for piece in r.subtract(rect):
                valid.add(piece, holders.copy())
        valid.add(rect, Holders(devices))

    def set_only_holder_of(self, rect: Rect, pieces: list[Rect], devices) -> None:
        """set_only_holder(piece, devices) for each of the disjoint `pieces` of `rect`, in
        order; with one query of the valid pieces when none overlaps `rect` (a gradient's
        part summed for the first time: each piece is then added as it is)."""
        valid = self.valid
        if not pieces:
            return
        if valid.overlapping(rect):
            for piece in pieces:
                self.set_only_holder(piece, devices)
            return
        self.held.clear()
        for piece in pieces:
            valid.add(piece, Holders(devices))

    def retire_pending(self, rect: Rect, found=None) -> None:
        """Forget the pending sums in `rect`: those overlapping it (`found`, when the caller
        has just asked pending.overlapping(rect)) lose their part of it."""
        pending = self.pending
        pending.retire(rect, pending.overlapping(rect) if found is None else found)


class RegionPlanner:
    """Plans one region over the launches that touch it, in program order."""

    def __init__(self, region: Region, machine, initial: Iterable[tuple[Rect, int]] = ()):
        self.region = region
        self.machine = machine
        self._ranks = [d.rank for d in machine.devices]    # device -> its rank
        self._inside = inside_test(region.rect.ndim)
        self.compiled = COMPILED_READS
        self.state = PieceState(region, len(self._ranks)) if self.compiled else \
            RegionState(region)
        self._rank_array = None     # self._ranks as int64 (the compiled walk's)
        self.buffers: dict[tuple[int, bool], BufferAccesses] = {}
        self.instance_rects: dict[int, Rect] = {}
        self.partial_rects: dict[int, Rect] = {}
        # device -> elements copies took from it (SentCounts: a dict's API over an array)
        self.sent = SentCounts(len(self._ranks)) if self.compiled else {}
        self.initial: list[tuple[Rect, tuple[int, ...]]] = []
        # device -> the initial rects its instance holds, written (by None: initial data)
        # into its BufferAccesses when _buffer first makes it: a weight replicated on 1,024
        # devices whose planner some launches never ask about most devices costs no buffer
        # per device (the same accesses result, as the writes come first either way).
        self._initial_writes: dict[int, list[Rect]] = {}
        initial = list(initial)
        checked = None
        for rect, device in initial:
            self.machine[device]
            if rect is not checked:
                if not region.rect.contains(rect):
                    raise PlanError(f"Initial data of '{region.name}': {rect} is outside the "
                                    f"region {region.rect}.")
                checked = rect
            self._instance_rect(device, rect)
            writes = self._initial_writes.get(device)
            if writes is None:
                self._initial_writes[device] = [rect]
            else:
                writes.append(rect)
            self.initial.append((rect, (device,)))
        first = initial[0][0] if initial else None
        if first is not None and not first.empty and all(r == first for r, _ in initial):
            # A replicated value (a weight, optimizer state on every device): one valid
            # piece held by the devices in order, as add_holder device by device leaves it.
            self.state.valid.add(first, Holders(dict.fromkeys(d for _, d in initial)))
        else:
            for rect, device in initial:
                self.state.add_holder(rect, device)

    def _buffer(self, device: int, partial: bool, rect: Rect) -> BufferAccesses:
        self._instance_rect(device, rect, partial)
        buf = self.buffers.get((device, partial))
        if buf is None:
            buf = self.buffers[device, partial] = BufferAccesses()
            if not partial and self._initial_writes:
                for piece in self._initial_writes.pop(device, ()):
                    buf.write(piece, None)
        return buf

    def _instance_rect(self, device: int, rect: Rect, partial: bool = False) -> None:
        """The device's instance (or partial buffer) covers `rect` too: its bounding box."""
        rects = self.partial_rects if partial else self.instance_rects
        old = rects.get(device)
        if old is None:
            rects[device] = rect
        elif old is not rect and not self._inside(old, rect):
            # (Rect.contains unrolled; an empty rect leaves the bounding box as it is)
            rects[device] = old.union_bbox(rect)

    # -- step 1: reads -----------------------------------------------------------------------
    def plan_reads(self, launch, reads) -> list:
        """Nodes that bring the data `reads` [(color, device, rect)] need, as (node, pred refs,
        staged_from) in program order. Pending partial sums under a read rect are reduced
        first: one all-reduce when the devices reading exactly that rect are exactly the
        contributors and each holds a full partial of it (and there is no base), else a reduce
        on the first reader (reduction copies in, then a ReduceNode). Then copies bring every
        piece a reader lacks from a valid holder (_choose_source), merged per source."""
        out: list = []
        if len(self.state.pending):
            self._reduce_for_reads(launch.name, reads, out)
        if self.compiled:
            copy_in_all(self, launch, reads, out)
            return out
        for color, device, rect in reads:
            self._copy_in(launch, color, device, rect, out)
        return out

    # Source choices: a subclass that logs them (slabreplay._RecordingPlanner) sets this and
    # takes the compiled walk's in _logged; one that forces them gives them in
    # _forced_choices (a list popped from its end).
    _logs_choices = False

    def _logged(self, choices: list) -> None:
        """The compiled walk's source choices [(holders, device, elements, src)]."""

    def _forced_choices(self) -> list | None:
        return None

    def _unwritten(self, launch, color, device: int, rect: Rect, covered: int) -> str:
        return (f"Launch '{launch.name}' point {color} on device {device} reads "
                f"'{self.region.name}'{rect}, but only {covered} of its "
                f"{rect.volume} elements were ever written. Write the region "
                "first, or declare it as initial data of the plan.")

    # -- step 2: the points' requirements ------------------------------------------------------
    def access_points(self, refs, points, accesses, replicas: bool) -> list:
        """access() of each of one launch's `accesses` of this region [(point index,
        requirement index, requirement)], in order: [(pred refs, Red+ targets)]. `refs`,
        `points`: the launch's task refs and expanded points by point index. A read, the most
        common access, is done here inline (access() without its calls)."""
        out = []
        append = out.append
        replica_writes: set = set()
        buffers, rects, inside = self.buffers, self.instance_rects, self._inside
        access = self.access
        fast = FAST_PATHS
        for pi, k, req in accesses:
            device = points[pi][1]
            if req.privilege is not _R or not fast:
                append(access(refs[pi], device, req, replicas, replica_writes))
                continue
            rect = req.rect
            buf = buffers.get((device, False))
            if buf is None:
                buf = self._buffer(device, False, rect)
            else:
                box = rects[device]         # (a buffer's instance has a box)
                if box is not rect and not inside(box, rect):
                    self._instance_rect(device, rect)
            append((buf.read(rect, refs[pi]), None))
        return out

    # -- step 2: one point's requirement --------------------------------------------------------
    def access(self, task_ref, device: int, req, replicas: bool, replica_writes: set):
        """Record a task's requirement on this region; returns (pred refs, Red+ targets)."""
        rect, priv = req.rect, req.privilege
        st = self.state
        if priv.reads:
            buf = self._buffer(device, False, rect)
            preds = buf.read(rect, task_ref)        # a set of its own
            if not priv.writes:
                return preds, None
            preds |= buf.write(rect, task_ref)
        elif priv.writes:
            preds = self._buffer(device, False, rect).write(rect, task_ref)
        else:
            preds = set()
        if priv.writes:
            if len(st.pending):
                st.retire_pending(rect)
            if replicas and rect in replica_writes:
                st.add_holder(rect, device)
            else:
                st.set_only_holder(rect, (device,))
                replica_writes.add(rect)
            return preds, None
        if priv is _RED:
            targets = self._reduce_targets(device, rect)
            for t in targets:
                preds |= self._buffer(device, t.partial, t.piece).write(t.piece, task_ref)
            return preds, targets
        return preds, None

    def _reduce_targets(self, device: int, rect: Rect) -> tuple[ReduceTarget, ...]:
        """Where a Red+ contribution of `device` to `rect` goes, piece by piece (in the
        partial buffer?, accumulate?). Pieces already holding partial sums on
        this device accumulate there. New pieces go straight into the device's instance when
        the region has no value there (a gradient: the sum starts from nothing), and into
        the partial buffer where a value exists (it is the base the sums are added to)."""
        st = self.state
        found = st.pending.of_device(device, rect)
        if not found and FAST_PATHS and not rect.empty and not st.valid_meets(rect):
            # The common case, a gradient's first sum here: one piece into the instance.
            st.pending.add(rect, (device, False))
            return (ReduceTarget(rect, False, False),)
        targets, rest = [], [rect]
        for _, held, (_, partial) in found:
            targets.append(ReduceTarget(held.intersect(rect), partial, True))
            rest = [p for q in rest for p in q.subtract(held)]
        for q in rest:
            based = [r.intersect(q) for _, r, _ in st.valid.overlapping(q)]
            unbased = subtract_all(q, based)
            if not unbased:
                # All of q has a value: one piece, however fragmented the value's holders
                # are (each pending piece becomes its own reduction copy).
                based = [q]
            for piece in based:
                targets.append(ReduceTarget(piece, True, False))
            for piece in unbased:
                targets.append(ReduceTarget(piece, False, False))
        for t in targets:
            if not t.accumulate:
                st.pending.add(t.piece, (device, t.partial))
        return tuple(targets)

    # -- copies and reductions ------------------------------------------------------------------
    def _copy_in(self, launch, color, device: int, rect: Rect, out: list) -> None:
        """Copies bringing `rect` onto `device`: the valid pieces it lacks, by source device,
        each source's pieces merged into as few rects as their shapes allow (the valid
        pieces are often fragments of one producer part, split by earlier readers)."""
        st = self.state
        held = st.held
        if (device, rect) in held:      # read before, nothing written since: all held
            return
        if FAST_PATHS and not rect.empty:
            # A valid piece of exactly `rect` (the valid pieces are disjoint: it alone) that
            # the reader holds: what the walk below finds, without it.
            holders = st.valid.exact_value(rect)
            if holders is not None and device in holders:
                held.add((device, rect))
                return
        covered = 0
        lacking = []
        by_writer: dict[int, list] = {}     # the pieces lacked, by their first holder
        for i, r, holders in st.valid.overlapping(rect):
            piece = r.intersect(rect)
            covered += piece.volume
            if device in holders:
                continue
            lacking.append((i, r, piece, holders))
            by_writer.setdefault(holders[0], []).append((piece, holders))
        if covered != rect.volume:
            raise PlanError(self._unwritten(launch, color, device, rect, covered))
        by_source: dict[int, list[Rect]] = {}
        for group in by_writer.values():
            self._group_sources(group, device, by_source)
        for src, pieces in by_source.items():
            for piece in merge_adjacent(pieces) if len(pieces) > 1 else pieces:
                self._copy(launch.name, piece, src, device, out)
        st.add_holder_to(lacking, device)
        held.add((device, rect))

    def _group_sources(self, group, device: int, by_source: dict) -> None:
        """Sources of a read's lacking pieces [(piece, holders)] with one first holder (their
        writer), into `by_source` (source -> pieces). Those with a holder on the reader's
        rank, and those without, each come from one holder where one holds them all (picked
        among those), else each from its own pick; picks see the counts as before the group,
        which then counts its elements by source. Fragments of one producer's piece, held by
        different earlier readers, picked and counted one by one went to alternating holders:
        thousands of copies no merge joins (design.md, 2026-12-06). A gather's parts (one
        piece per writer) are spread as before. Every pick and count is a _choose_source call
        (slabplans.py records and replays them)."""
        choose = self._choose_source
        if len(group) == 1:
            piece, holders = group[0]
            src = choose(holders, device, piece.volume)
            pieces = by_source.get(src)
            if pieces is None:
                by_source[src] = [piece]
            else:
                pieces.append(piece)
            return
        ranks = self._ranks
        rank = ranks[device]
        near, far = [], []
        for item in group:
            (near if any(ranks[h] == rank for h in item[1]) else far).append(item)
        counts: dict[int, int] = {}
        for part in (near, far):
            one = None
            if len(part) > 1:
                common = set(part[0][1]).intersection(*(h for _, h in part[1:]))
                if part is near:
                    common = {h for h in common if ranks[h] == rank}
                if common:
                    one = choose(tuple(h for h in part[0][1] if h in common), device, 0)
            for piece, holders in part:
                src = choose(holders, device, 0) if one is None else one
                counts[src] = counts.get(src, 0) + piece.volume
                pieces = by_source.get(src)
                if pieces is None:
                    by_source[src] = [piece]
                else:
                    pieces.append(piece)
        for src, elements in counts.items():
            choose((src,), device, elements)

    def _choose_source(self, holders, device: int, elements: int) -> int:
        """The holder to copy `elements` from onto `device`: one on the same rank if any,
        and among those the one that has sent the fewest elements of this region so far
        (then the one that got the value first). Spreading the sends matters for gathers:
        when every device reads every part, the first reader holds everything next, and
        taking all later copies from it would queue them on its one link ((t-1)^2 sends
        instead of t-1). The count is per region, so a region re-planned alone plans as in a
        full plan."""
        sent = self.sent
        if len(holders) == 1:
            src = holders[0]
        else:
            # Ties go to the earliest holder (holders are kept in the order they got the
            # value, its writer first), so a piece is forwarded only to relieve a busier one.
            ranks = self._ranks
            rank = ranks[device]
            src = low = None            # the least-sent holder on the device's rank
            first = least = None        # ... and among all holders
            for h in holders:
                n = sent.get(h, 0)
                if ranks[h] == rank:
                    if src is None or n < low:
                        src, low = h, n
                elif src is None and (first is None or n < least):
                    first, least = h, n
            if src is None:
                src = first
        sent[src] = sent.get(src, 0) + elements
        return src

    @staticmethod
    def _emit(node, preds: set, out: list, staged_from=None):
        """Append (node, its predecessor refs, the copy behind each reduce input or None)."""
        preds.discard(node)
        out.append((node, preds, staged_from))
        return node

    def _copy(self, owner: str, rect: Rect, src: int, dst: int, out: list,
              reduction: bool = False, from_partial: bool = False):
        """A copy into dst's instance, or (reduction) of src's partial sums, held in its
        partial buffer or its instance, into a staging buffer on dst."""
        node = CopyNode(-1, owner, self.region, rect, src, dst, reduction, from_partial)
        if reduction:
            preds = self._buffer(src, from_partial, rect).read(rect, node)
        else:
            preds = self._instance(src, rect).read(rect, node)
            preds |= self._instance(dst, rect).write(rect, node)
        preds.discard(node)
        out.append((node, preds, None))
        return node

    def _instance(self, device: int, rect: Rect) -> BufferAccesses:
        """_buffer(device, False, rect) where the instance's buffer exists and its box holds
        `rect` already (most copies), without its calls."""
        buf = self.buffers.get((device, False))
        if buf is None:
            return self._buffer(device, False, rect)
        box = self.instance_rects[device]        # (a buffer's instance has a box)
        if box is not rect and not self._inside(box, rect):
            self._instance_rect(device, rect)
        return buf

    def _reduce_for_reads(self, owner: str, reads, out: list) -> None:
        st = self.state
        by_rect: dict[Rect, list[int]] = {}
        for _, device, rect in reads:
            devs = by_rect.setdefault(rect, [])
            if device not in devs:
                devs.append(device)
        # No valid piece before these reductions, and none of them (each changes valid pieces
        # only in its rect; `reduced`: their box) met a rect: its base is empty, no query.
        valued, reduced = not FAST_PATHS or bool(len(st.valid)), None
        launch = FAST_PATHS and len(by_rect) > 1
        if launch:      # the sums met, out of the index until done; apart: parts summed as is
            pending, st.pending = st.pending, LaunchSums(st.pending, by_rect)
            self._apart = st.pending.apart
        whole = FAST_PATHS      # so far each rect's readers left holding all of it
        try:
            for rect, devices in by_rect.items():
                contribs = st.pending.overlapping(rect)
                if not contribs:
                    whole = False
                    continue
                based = valued or (reduced is not None and reduced.overlaps(rect))
                if is_allreduce(st, rect, devices, contribs, based):
                    self._allreduce(owner, rect, sorted(devices), contribs, out)
                else:
                    whole = self._reduce_to(owner, rect, devices[0], contribs, out, based) \
                        and len(devices) == 1 and whole
                reduced = rect if reduced is None else reduced.union_bbox(rect)
            if whole:
                readers_hold(st.held, by_rect)
        finally:
            if launch:
                st.pending.close()
                self._apart, st.pending = False, pending

    _apart = False      # (set by _reduce_for_reads for its reductions)

    def _allreduce(self, owner: str, rect: Rect, devices, contribs, out: list) -> None:
        in_partial = {dev: partial for _, _, (dev, partial) in contribs}
        node = AllReduceNode(-1, owner, self.region, rect, tuple(devices),
                             tuple(in_partial[d] for d in devices))
        preds: set = set()
        for d in devices:
            preds |= self._buffer(d, in_partial[d], rect).read(rect, node)
            preds |= self._buffer(d, False, rect).write(rect, node)
        self._emit(node, preds, out)
        self.state.retire_pending(rect, contribs)
        self.state.set_only_holder(rect, devices)

    def _reduce_to(self, owner: str, rect: Rect, device: int, contribs, out: list,
                   based: bool = True) -> bool:
        st = self.state
        base = st.valid.overlapping(rect) if based else ()
        # Each sum's part of `rect`, in the sums' order (the reduction's inputs and, in
        # _mark_summed, the pieces it leaves summed).
        parts = [r.intersect(rect) for _, r, _ in contribs]
        if not base and all(dev == device and not partial for _, _, (dev, partial) in contribs):
            # The sums are already in the reader's instance: nothing to run.
            return self._mark_summed(rect, device, contribs, parts)
        inputs: list = []
        # The base: the value the partial sums are added to, gathered onto `device`.
        for _, r, holders in base:
            piece = r.intersect(rect)
            if device not in holders:
                src = self._choose_source(holders, device, piece.volume)
                self._copy(owner, piece, src, device, out)
                st.add_holder(piece, device)
            inputs.append((-1, ReduceInput("instance", piece), None))
        region = self.region
        for k in sorted(range(len(contribs)), key=lambda k: (contribs[k][2][0], contribs[k][1].lo)):
            dev, partial = contribs[k][2]
            piece = parts[k]
            if dev == device:
                inputs.append((dev, ReduceInput("partial" if partial else "instance", piece),
                               None))
            else:
                # A reduction copy (_copy inlined: a new node is in no pred set yet).
                copy = CopyNode(-1, owner, region, piece, dev, device, True, partial)
                buf = self._buffer(dev, True, piece) if partial else self._instance(dev, piece)
                out.append((copy, buf.read(piece, copy), None))
                inputs.append((dev, ReduceInput("staged", piece), copy))
        inputs.sort(key=_first)
        node = ReduceNode(-1, owner, region, rect, device, tuple(i for _, i, _ in inputs))
        staged_from = [c for _, _, c in inputs]
        preds = {c for c in staged_from if c is not None}
        for inp in node.inputs:
            if inp.source == "instance":
                preds |= self._instance(device, inp.rect).read(inp.rect, node)
            elif inp.source == "partial":
                preds |= self._buffer(device, True, inp.rect).read(inp.rect, node)
        preds |= self._instance(device, rect).write(rect, node)
        self._emit(node, preds, out, staged_from)
        return self._mark_summed(rect, device, contribs, parts)

    def _mark_summed(self, rect: Rect, device: int, contribs, parts) -> bool:
        """After a reduction of `rect` onto `device` of the sums `contribs` (whose parts of
        `rect` are `parts`): the sums lose `rect`, and `device` alone holds what they added.
        Whether that is all of `rect` (_reduce_to returns it too)."""
        st = self.state
        st.pending.retire(rect, contribs)
        volume = rect.volume
        for p in parts:
            if p.volume == volume:      # the common case: a sum of all of `rect`
                st.set_only_holder(rect, (device,))
                return True
        # Only where partial sums were added does `device` alone hold the result; the base
        # elsewhere is unchanged (its holders stay valid), and elements with neither base nor
        # partial sums stay unwritten, so reading them is still a PlanError.
        pieces = launch_summed(rect, contribs, parts, self._apart)
        st.set_only_holder_of(rect, pieces, (device,))
        return sum(p.volume for p in pieces) == volume

    # -- the end state ---------------------------------------------------------------------------
    def final_valid(self) -> list[tuple[Rect, tuple[int, ...]]]:
        return sorted(((r, tuple(sorted(h))) for _, r, h in self.state.valid),
                      key=lambda x: (x[0].lo, x[0].hi))

    def final_pending(self) -> list[tuple[Rect, int, bool]]:
        return [(r, d, partial) for _, r, (d, partial) in self.state.pending]
