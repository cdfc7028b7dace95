"""Regions that are planned alike, planned once.

A region's plan is a function of its shape and dtype, its initial pieces and, per launch in its
log, of what the launch's points ask of it (point, device, rect, privilege, in order) and
whether the launch is one of replicas; of nothing else (coherence.py plans regions
independently; regionmemo.py keys remembered plans the same way). The launches' identities
only name things: a node's owner, a task's reference (launch index, point index). Nor does
it depend on which requirement of a point an access is: a plan's preds and Red+ targets come
per access, in order, and go where each region's own accesses say. So regions the same
launches ask alike under other requirements (an LSTM's weight_ih and weight_hh, bias_ih and
bias_hh, their gradients and momenta; batchnorm's weight and bias) form one class too
(RegionClass.slots, _per_slots; tests/taskrt/test_class_slots.py).

Models repeat. A transformer's blocks, a ResNet stage's bottlenecks, Inception's twin modules,
split alike, give regions whose logs ask exactly the same things of them at other launches
(a block's weights, its activations, their gradients, each block's optimizer state). Such
regions form a class (`RegionClasses.find`: the key regionmemo.region_key gives, made from
interned per-launch signatures; where a launch's points ask alike, found first by the
identities of their rects, `_AlikeSignatures`, or where the launch's RequirementsTable has
columns, by the identities of a column's pair: per launch, not per point). When a launch
first touches a member of a class of two or more, the class's first member is planned
alone over its whole log
(`plan_alone`, the same RegionPlanner calls add_launch makes), and every member gets that plan
with its own region and launches (`stamp`: new node objects, the same rects, devices and Red+
targets, references moved to the member's launches and nodes); the planner installs each
launch's part of it as the launch is added. A planner that is never re-planned (plan())
takes only the new nodes, their groups made from the template's refs compiled once
(stampedreads.py), and reads the template's preds through the maps that move them, as it
builds the tasks (taskcolumns.py): a member then costs its nodes, not its accesses. The
graph is node for node the one planning every region gives
(tests/taskrt/test_region_classes.py, golden digests), and a model of 32 equal blocks plans
each distinct region once instead of 32 times. A one-shot planner also joins classes that
differ only in the extents of dimensions every rect of their logs spans (regionshapes.py:
Inception-v3's convolutions at other widths), a member's rects moved to its region's.

Members share the first member's RegionPlanner (its end state: buffers' bounding rects, valid
pieces, pending sums; equal for all of them, by the key). The planner never plans more into a
shared one: a later add_launch re-plans such a region alone first (regionplans.own_planner), and
replace() always plans into a new RegionPlanner.
"""
from __future__ import annotations

from collections import defaultdict
from operator import attrgetter, is_, itemgetter

from . import movedreads, regionshapes
from .coherence import RegionPlanner
from .launch import IndexLaunch, RequirementsTable
from .launchplan import DeferredAccesses, DeferredReads, accesses_list, by_region_and_alike, \
    reads_list
from .movedreads import MovedReads
from .regionmemo import RegionPlan, key_signature
from .regionshapes import shape_classes, shifter
from .stampedreads import TemplateReads
from .taskgraph import (COPY, REDUCE, AllReduceNode, CopyNode, ReduceInput, ReduceNode,
                        ReduceTarget)

# A one-shot planner's class members get their read groups by arrays from their template's
# (stampedreads.py). Off: stamp_nodes' moved refs, resolved node by node (the oracle of
# tests/taskrt/test_stamped_reads.py; the graph is the same).
STAMPED_READS = True


class RegionClass:
    """The regions of one key, in order of their first launch; their plans once made."""
    __slots__ = ("members", "logs", "slots", "template", "unstamped", "reads", "shifts",
                 "variants")

    def __init__(self, members: list[str], logs: list[list[int]], slots: list[list]):
        self.members = members          # region names
        self.logs = logs                # per member: its launches (indices), in program order
        # per member, per log entry: the requirement indices of its accesses (_slots). The
        # class's key has none (regionmemo.key_signature): members may differ here.
        self.slots = slots
        self.template: RegionPlan | None = None     # the first member's plan, once made
        self.unstamped = len(members)   # members not yet given their plan
        # The template's read nodes with their refs compiled (a planner never re-planned).
        self.reads: TemplateReads | None = None
        # Member region rect -> regionshapes.shifter from the template's (members of one
        # rect share one, and so their moved rects and targets, as exact members share the
        # template's).
        self.shifts: dict = {}
        # (entry, slots) -> a copy of the template's per-access list of that entry, for the
        # members whose accesses there are under other requirement indices (_plan_of).
        self.variants: dict = {}


class RegionClasses:
    """The classes of two or more regions among a sequence of launches about to be added to a
    planner, and each member's plan as the planner asks for it."""

    def __init__(self, planner, launches: list, points_of, base: int):
        """`points_of(li)`: launch li's expanded points (the launches are planner.plans[base:]
        once added, `launches` until then)."""
        self.planner = planner
        self.launches = launches
        self.points_of = points_of
        self.base = base
        self.of: dict[str, tuple[RegionClass, int]] = {}    # region -> (class, member index)
        self._plans: dict[str, RegionPlan] = {}             # member -> its plan, until done
        self._next: dict[str, int] = {}                     # member -> its next log entry
        # li -> by_region of its points, from find() until the launch is added (release).
        self._grouped: dict[int, tuple[dict, dict]] = {}
        # li -> its regions' signature ids, in order; those of launches found free of
        # interference (interference.py decides from exactly what a signature holds).
        self._launch_sigs: dict[int, tuple] = {}
        self._free: set[tuple] = set()
        # id(a template's per-access list) -> its taskcolumns.CompiledColumn, for members.
        self.compiled: dict[int, object] = {}

    @classmethod
    def find(cls, planner, launches: list, expanded: list, base: int,
             points_of=None, shapes: bool = False) -> "RegionClasses":
        """Classes among `launches` (with their expanded points `expanded`), which will be
        launches base, base + 1, ... of `planner`. `shapes`: also classes up to whole
        dimensions (regionshapes.py; plan_once only, whose retire_region moves a member's
        end state)."""
        self = cls(planner, launches, points_of or (lambda li: expanded[li - base]), base)
        ids: dict[tuple, int] = {}              # per-launch key signature -> a small int
        alike_ids = _AlikeSignatures(ids)
        logs: dict[str, list[int]] = defaultdict(list)
        sigs: dict[str, list[int]] = defaultdict(list)
        ks: dict[str, list] = defaultdict(list)     # per region and log entry: _slots
        for i, points in enumerate(expanded):
            replicas, li = launches[i].replicas, base + i
            columns = _table_columns(launches[i], points)
            # (a one-shot planner's reads made when asked for: grouped, _entries)
            grouped, alike = by_region_and_alike(points, not planner.replannable,
                                                 columns is not None)
            self._grouped[li] = grouped
            devices = alike_ids.devices(points) if alike else None
            mine = []
            for k, (name, acc) in enumerate(grouped[1].items()):
                if columns is not None or alike:    # (one requirement index per region)
                    sid = alike_ids.sid(replicas, points, acc, devices) if columns is None \
                        else alike_ids.table_sid(replicas, points, acc, devices, columns[k], k)
                    slots = acc.k if type(acc) is DeferredAccesses else acc[0][1]
                else:
                    listed = accesses_list(acc)
                    sig = key_signature(replicas, points, listed)
                    sid = ids.get(sig)
                    if sid is None:
                        sid = ids[sig] = len(ids)
                    slots = _slots(listed)
                logs[name].append(li)
                sigs[name].append(sid)
                ks[name].append(slots)
                mine.append((sid, slots))
            self._launch_sigs[li] = tuple(mine)
        sig_of = list(ids) if shapes and regionshapes.GENERIC_CLASSES and planner.columns \
            else None
        del ids, alike_ids
        # Per region its last launch, regions in the order the launches' points first name
        # them (each launch's grouped accesses are in first-use order): plan_once retires
        # each after its last (a walk over every point's requirements took ~0.14 s of
        # GPT-3 2.7B at 1,024 GPUs, Megatron t=8: 4.65M of them).
        self.last_use: dict[str, int] = {name: log[-1] for name, log in logs.items()}
        by_key: dict[tuple, list[str]] = defaultdict(list)
        regions, initial = planner.regions, planner.initial
        for name, sig in sigs.items():
            if planner.touched_before(name):
                continue            # (touched by launches added before: planned as usual)
            region = regions[name]
            by_key[(region.rect, region.dtype, tuple(initial.get(name, ())),
                    tuple(sig))].append(name)
        groups = by_key.values() if sig_of is None else \
            shape_classes(by_key.values(), sigs, sig_of, regions, initial)
        for names in groups:
            if len(names) > 1:
                rc = RegionClass(names, [logs[n] for n in names], [ks[n] for n in names])
                for k, name in enumerate(names):
                    self.of[name] = (rc, k)
        return self

    def __contains__(self, name: str) -> bool:
        return name in self.of

    def __len__(self) -> int:
        return len(self.of)

    @property
    def num_classes(self) -> int:
        return len({id(rc) for rc, _ in self.of.values()})

    def next_entry(self, name: str, li: int):
        """Member `name`'s part of launch `li` (the next entry of its log): (its read nodes or
        None, [(preds, Red+ targets)] per access, its RegionPlanner, moves). Makes the
        class's template and the member's plan on the member's first launch. `moves` is None
        when the preds are the member's own (a planner that re-plans); else (li_of,
        node_of): the preds are the template's, to be read with launch indices and nodes
        moved by these maps, (None, None) for the template itself (a planner that is never
        re-planned reads them as it builds the tasks, taskcolumns.py: a member costs its
        nodes, not its accesses); (li_of, node_of, shift) for a member whose region differs
        from the template's along dimensions every rect spans (regionshapes.py): its Red+
        targets are the template's moved by `shift`."""
        got = self._plans.get(name)
        if got is None:
            got = self._plan_of(name)
            self._next[name] = 0
        plan, moves = got
        j = self._next[name]
        rc, k = self.of[name]
        assert rc.logs[k][j] == li, (name, li, rc.logs[k][j])
        if j + 1 == len(plan.nodes):
            del self._plans[name], self._next[name], self.of[name]
        else:
            self._next[name] = j + 1
        return plan.nodes[j], plan.accesses[j], plan.planner, moves

    def _plan_of(self, name: str) -> tuple:
        rc, k = self.of[name]
        if rc.template is None:
            first = rc.members[0]
            rc.template = plan_alone(self.planner, first, self._entries(rc.logs[0], first))
        moves = None
        if k == 0:
            plan = rc.template
            if self.planner.columns:
                moves = (None, None)    # (the template's own: kept compiled for the others)
        else:
            region, lis = self.planner.regions[name], rc.logs[k]
            owners = [self._launch(li).name for li in lis]
            if not self.planner.columns:
                plan = stamp(rc.template, region, lis, owners)
            else:
                template = rc.template
                li_of = dict(zip(template.lis, lis))
                # (a member of other extents along whole dimensions: regionshapes.py)
                shift = rc.shifts.get(region.rect, False)
                if shift is False:
                    shift = rc.shifts[region.rect] = shifter(
                        self.planner.regions[rc.members[0]].rect, region.rect)
                if not STAMPED_READS:
                    nodes, node_of = stamp_nodes(template, region, li_of, owners, shift)
                else:
                    if rc.reads is None:
                        rc.reads = TemplateReads(template)
                    nodes, node_of = rc.reads.stamp(region, owners, lis, shift)
                plan = RegionPlan(template.planner, nodes, _per_slots(rc, k), template.size,
                                  name, tuple(lis))
                moves = (li_of, node_of) if shift is None else (li_of, node_of, shift)
                if shift is not None:
                    self.planner._shifted[name] = shift
        rc.unstamped -= 1
        if not rc.unstamped:
            rc.template = rc.reads = rc.shifts = rc.variants = None     # (each member holds
            # its own plan now)
        got = self._plans[name] = (plan, moves)
        return got

    def _launch(self, li: int):
        return self.launches[li - self.base]

    def _entries(self, lis: list[int], name: str) -> list[tuple]:
        """(li, launch, points, reads or None, accesses) of region-independent launches, for
        planning region `name` (its reads made)."""
        out = []
        for li in lis:
            reads, accesses = self._grouped[li]
            mine = {name: reads_list(reads[name])} if name in reads else {}
            out.append((li, self._launch(li), self.points_of(li), mine,
                        {name: accesses_list(accesses[name])}))
        return out

    def grouped(self, li: int) -> tuple[dict, dict]:
        """Launch li's points grouped by region (launchplan.by_region: reads, accesses), as
        find() made them; until release(li). The reads of regions not planned with a
        class are made now (by_region's deferred reads)."""
        reads, accesses = self._grouped[li]
        of = self.of
        for name, r in reads.items():
            if type(r) is DeferredReads and name not in of:
                reads[name] = reads_list(r)
        # (a class member's accesses stay deferred where the tasks are built by columns:
        # taskcolumns.py reads only its template's)
        columns = self.planner.columns
        for name, a in accesses.items():
            if type(a) is DeferredAccesses and (name not in of or not columns):
                accesses[name] = accesses_list(a)
        return reads, accesses

    def release(self, li: int) -> None:
        """Launch li is added: its grouping is not asked for again."""
        self._grouped.pop(li, None)
        self._launch_sigs.pop(li, None)

    def free_of_interference(self, li: int) -> bool:
        """Whether a launch whose regions have launch li's signatures and requirement
        indices, in order, was found free of interference (interference.check_interference's
        verdict on a region is a function of its signature: rects, privileges, devices,
        points, replicas?)."""
        return self._launch_sigs[li] in self._free

    def found_free(self, li: int) -> None:
        """check_interference passed launch li."""
        self._free.add(self._launch_sigs[li])


class _AlikeSignatures:
    """Signature ids (RegionClasses.find's `ids`: regionmemo.key_signature -> a small int) of
    the accesses of launches whose points ask alike, found by a key of the same things without
    a tuple per access: replicas, the requirement index (which the id leaves out: it is
    made by value) and privilege (one per region there),
    the points' devices (an id per distinct tuple) and the identities of the rects, in point
    order. Equal keys mean equal signatures (the rects are the same objects; all of them
    are alive while find runs, so no identity is reused); a key seen first takes the
    signature's id by value, so the ids are exactly those `key_signature` gives. The rects of
    a model's repeated blocks are the same objects (GPT-3 Megatron @1,024: 4,094 such
    region accesses, 3.9M point accesses, 97 keys)."""
    __slots__ = ("ids", "by_key", "device_ids", "by_column", "alive")

    def __init__(self, ids: dict):
        self.ids = ids
        self.by_key: dict[tuple, int] = {}
        self.device_ids: dict[tuple, int] = {}
        self.by_column: dict[tuple, int] = {}
        self.alive: list = []       # (the pairs keyed by identity, held while find runs)

    def devices(self, points) -> int:
        """An id of the points' devices, in order."""
        devices = tuple(map(_second, points))
        got = self.device_ids.get(devices)
        if got is None:
            got = self.device_ids[devices] = len(self.device_ids)
        return got

    def table_sid(self, replicas: bool, points, accesses, devices: int, column: tuple,
                  k: int) -> int:
        """sid of requirement index k of a launch whose RequirementsTable has columns
        (`column`: its pair at k): keyed by the pair's identities, not per point."""
        order, parts = column
        key = (replicas, k, devices, id(order), id(parts))
        got = self.by_column.get(key)
        if got is None:
            got = self.by_column[key] = self._of(key_signature(replicas, points,
                                                               accesses_list(accesses)))
            self.alive.append(column)
        return got

    def _of(self, sig: tuple) -> int:
        got = self.ids.get(sig)
        if got is None:
            got = self.ids[sig] = len(self.ids)
        return got

    def sid(self, replicas: bool, points, accesses: list, devices: int) -> int:
        """The signature id of `accesses` [(point index, k, requirement)] of every point in
        order, one k and privilege (launchplan.by_region_and_alike; or its DeferredAccesses);
        `devices` their id."""
        if type(accesses) is DeferredAccesses:
            k, first, reqs = accesses.k, accesses.col[0], accesses.col
        else:
            _, k, first = accesses[0]
            reqs = map(_third, accesses)
        key = (replicas, k, first.privilege.code, devices, tuple(map(id, map(_rect, reqs))))
        got = self.by_key.get(key)
        if got is None:
            got = self.by_key[key] = self._of(key_signature(replicas, points,
                                                            accesses_list(accesses)))
        return got


def _slots(accesses: list):
    """The requirement indices of one launch's `accesses` [(point, k, requirement)] of one
    region: k where every access is under k (where the points ask alike: one k), else the
    tuple of them, in order."""
    ks = tuple(map(_second, accesses))
    k = ks[0]
    return k if ks.count(k) == len(ks) else ks


def _per_slots(rc: RegionClass, k: int) -> list:
    """Member k's per-access lists: its template's, each entry's shared where the member's
    accesses there are under the template's requirement indices, else a copy (one per
    entry and indices, shared by the members alike there). The preds and Red+ targets are
    the same (planning reads no requirement index, regionmemo.region_key); taskcolumns.py
    reads a member's requirement indices from its accesses, compiling each per-access
    list once, by its identity: a copy is compiled with the indices of its own members."""
    template = rc.template.accesses
    mine, first = rc.slots[k], rc.slots[0]
    if mine == first:
        return template
    variants = rc.variants
    out = []
    for j, (slots, per) in enumerate(zip(mine, template)):
        if slots != first[j]:
            got = variants.get((j, slots))
            if got is None:
                got = variants[j, slots] = list(per)
            per = got
        out.append(per)
    return out


_first, _second, _third = itemgetter(0), itemgetter(1), itemgetter(2)
_rect = attrgetter("rect")


def _table_columns(launch, points) -> list | None:
    """The columns of the RequirementsTable whose tuples are `points`' requirements, point
    by point (the table expand took them from: taskrt/expand.py's test), or None."""
    table = getattr(launch.projection, "__self__", None)
    columns = getattr(table, "columns", None)   # (a table pickled before it had them)
    if type(table) is not RequirementsTable or columns is None or \
            table.colors is not launch.colors or not points or \
            type(launch).requirements is not IndexLaunch.requirements or \
            launch.projection != table.__getitem__ or len(points) != len(table) or \
            not all(map(is_, map(_third, points), table.values())):
        return None
    return columns


def plan_alone(planner, name: str, entries: list[tuple], rp=None) -> RegionPlan:
    """Plan region `name` over its log alone: entries [(li, launch, points, reads, accesses)]
    (reads and accesses grouped by region, launchplan.by_region). The RegionPlanner calls,
    and the merging of a point's preds, are those of Planner._plan_reads / _plan_accesses.
    `rp`: the RegionPlanner to plan into (a new one with the region's initial data if None)."""
    if rp is None:
        rp = RegionPlanner(planner.regions[name], planner.machine,
                           planner.initial.get(name, ()))
    nodes, per_entry, size = [], [], 0
    for li, launch, points, reads, accesses in entries:
        mine = reads.get(name)
        items = rp.plan_reads(launch, mine) if mine else None
        nodes.append(items)
        size += len(items) if items else 0
        refs = [(li, pi) for pi in range(len(points))]
        per_entry.append(merged_per_point(accesses[name], rp.access_points(
            refs, points, accesses[name], launch.replicas)))
    return RegionPlan(rp, nodes, per_entry, size, name, tuple(li for li, *_ in entries))


def merged_per_point(accesses, planned: list) -> list:
    """[(preds, Red+ targets)] per access of one launch to one region, from what the
    RegionPlanner gave each access (`planned`, aligned with `accesses`): a point's preds
    on the region are the union over its accesses of it (in a set's order; a tuple), as
    Planner._plan_accesses keeps them per point."""
    if len(set(map(_first, accesses))) == len(accesses):
        # (each point accesses the region once, as in most launches: its preds are that
        # access's; no union to make)
        return [(tuple(preds) if preds else (), t) for preds, t in planned]
    merged: dict[int, tuple] = {}
    targets = []
    for (pi, _, _), (preds, t) in zip(accesses, planned):
        known = merged.get(pi)
        merged[pi] = (tuple(preds) if preds else ()) if known is None else \
            tuple(set(known).union(preds))
        targets.append(t)
    return [(merged[pi], t) for (pi, _, _), t in zip(accesses, targets)]


def stamp(plan: RegionPlan, region, lis_to, owners: list[str], shift=None) -> RegionPlan:
    """`plan` (made for another region over launches plan.lis) for `region` over launches
    `lis_to` (owners: their names): new nodes, references moved entry by entry; the same
    rects, devices, Red+ targets and RegionPlanner. `shift`: a function moving each rect
    (of nodes, reduction inputs and Red+ targets), for a plan made for another slab of the
    same region (slabplans.py)."""
    if shift is None and plan.lis == tuple(lis_to) and not any(plan.nodes):
        # No nodes and the same launches (an LSTM's weight_ih and weight_hh): every reference
        # is a task's and stays, so the per-access lists are shared (put_accesses reads them).
        return RegionPlan(plan.planner, [None if items is None else [] for items in plan.nodes],
                          plan.accesses, plan.size, region.name, plan.lis)
    li_of = dict(zip(plan.lis, lis_to))
    nodes, node_of = stamp_nodes(plan, region, li_of, owners, shift)
    moved = _mover(li_of, node_of)

    if shift is None:
        def targets_of(targets):
            return targets
    else:
        def targets_of(targets):
            return None if targets is None else \
                tuple([ReduceTarget(shift(t.piece), t.partial, t.accumulate) for t in targets])
    # A point's preds come back in later entries (each reader of a part names its writer):
    # each distinct tuple is moved once.
    moved_preds: dict = {}
    accesses = []
    for per in plan.accesses:
        out = []
        for preds, targets in per:
            new = moved_preds.get(preds)
            if new is None:
                new = moved_preds[preds] = tuple([moved(r) for r in preds])
            out.append((new, targets_of(targets)))
        accesses.append(out)
    return RegionPlan(plan.planner, nodes, accesses, plan.size, region.name, tuple(lis_to))


def stamp_nodes(plan: RegionPlan, region, li_of: dict, owners: list[str],
                shift=None) -> tuple[list, dict]:
    """stamp's read nodes: per entry of `plan`, new nodes for `region` (owners: the
    launches' names; `li_of`: launch index in plan -> in the new log), their references
    moved; and the map from plan's nodes to the new ones."""
    node_of: dict = {}
    if shift is None:
        def rect(r):
            return r

        def inputs_of(inputs):
            return inputs
    else:
        rect = shift

        def inputs_of(inputs):
            return tuple([ReduceInput(i.source, shift(i.rect), i.copy_id) for i in inputs])

    moved = _mover(li_of, node_of)     # node_of fills below, entry by entry
    # Read lists moved by their template entry's compiled refs (movedreads.py), or None:
    # ref by ref, each node's moved refs as a set.
    entries = _compiled(plan) if movedreads.MOVED_READS else None
    lis_to = tuple([li_of[li] for li in plan.lis]) if entries is not None else None
    remapped: dict = {}             # id(a moved list's lis) -> those launches moved
    pos_of = None                   # launch -> its log position in plan (a moved list's refs)

    nodes = []
    for j, (items, owner) in enumerate(zip(plan.nodes, owners)):
        if items is None:
            nodes.append(None)
            continue
        by_entry = entries is not None and bool(items)
        if by_entry:                # (refs left to the entry: None in each tuple)
            entry = entries[j]
            if type(entry) is MovedReads:
                lis = remapped.get(id(entry.lis))
                if lis is None:
                    lis = remapped[id(entry.lis)] = tuple([li_of[li] for li in entry.lis])
                entry = entry.entry
            else:
                lis = lis_to
            out = MovedReads()
            out.entry, out.lis, out.name = entry, lis, region.name
        else:
            out = []
            if type(items) is MovedReads:           # (moved ref by ref: its refs first)
                if pos_of is None:
                    pos_of = {li: j for j, li in enumerate(plan.lis)}
                items = list(zip(map(_first, items), items.refs(
                    lambda li: plan.nodes[pos_of[li]]), map(_third, items)))
        add = out.append
        for node, refs, staged in items:
            kind = node.kind
            if kind is COPY:
                new = CopyNode(-1, owner, region, rect(node.rect), node.src, node.dst,
                               node.reduction, node.from_partial)
            elif kind is REDUCE:
                new = ReduceNode(-1, owner, region, rect(node.rect), node.device,
                                 inputs_of(node.inputs))
            else:
                new = AllReduceNode(-1, owner, region, rect(node.rect), node.devices,
                                    node.in_partial)
            node_of[node] = new
            add((new, None if by_entry else {moved(r) for r in refs},
                 None if staged is None else [None if c is None else node_of[c]
                                              for c in staged]))
        nodes.append(out)
    return nodes, node_of


def _compiled(plan) -> list | None:
    """movedreads.compile_plan of `plan`, made once per plan object (kept on it)."""
    got = plan.moves
    if got is None:
        got = plan.moves = movedreads.compile_plan(plan) or False
    return got or None


def _mover(li_of: dict, node_of: dict):
    """A stamped plan's reference of `plan`'s: None stays None, a (launch index, point)
    moves its launch index (li_of), a node becomes its new node (node_of)."""
    def moved(r):
        if r is None:
            return None
        if type(r) is tuple:
            return (li_of[r[0]], r[1])
        return node_of[r]
    return moved
