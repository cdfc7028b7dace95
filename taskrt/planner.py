"""The planner: launches in program order -> a TaskGraph with exactly the true dependences.

Each launch is expanded into point tasks (on the launch's devices) and checked for
interference; then every region it touches is planned by that region's RegionPlanner
(coherence.py), independently of all other regions:
  Step 1: reads -- reduce pending partial sums, then copy in the pieces a reader lacks;
  Step 2: one TaskNode per point, with edges from the buffers' earlier accesses.
The nodes are kept as node groups (nodegroups.py): per launch, the copies/reductions of its
reads of each region (regions in order of first read), then its tasks; node ids are that
order, a topological one. Because regions are planned independently, `replace()` re-plans
only the regions that changed launches touch and rebuilds only their launches' groups (the
graph update delta simulation needs), giving exactly the graph a full plan of the new
launches gives. `groups()` hands the groups to the simulator; `finish()` builds the
TaskGraph object view the executors run from the same groups.
"""
from __future__ import annotations

import weakref
from collections import defaultdict
from itertools import repeat
from operator import itemgetter
from typing import Iterable, Mapping, Sequence

from . import replanning
from .coherence import RegionPlanner
from .errors import MappingError, PlanError
from .expand import expand
from .gcpause import gc_paused
from .geometry import Rect
from .graphview import graph_of
from .interference import check_interference
from .launch import IndexLaunch
from .launchplan import LaunchPlan, by_region, task_refs
from .machine import Machine
from .movedreads import MovedReads
from .nodegroups import NodeGroup, same_preds
from .oneshot import check_initial, plan_once
from .regionclasses import RegionClasses, merged_per_point
from .regionmemo import RegionPlanMemo
from .regionplans import install, own_planner
from .region import Region
from .settings import Settings
from .stampedreads import StampedReads
from .taskcolumns import PendingPreds, build_task_group
from .taskgraph import TaskGraph, TaskNode
from .undo import PlanUndo

# A planner that is never re-planned keeps what planning gives a launch's tasks by region
# (LaunchPlan.columns, read once by taskcolumns.build_task_group), and a region planned alike with others
# gives its class's preds with the launch indices and nodes to move them by, not moved
# copies (RegionClasses.next_entry). Off: per point as a re-plannable planner keeps them
# (the oracle of tests/taskrt/test_plan_columns.py; the graph is the same).
TASK_COLUMNS = True

# A rebuilt task group whose nodes have the predecessors of the group of before, in
# another order, is that group (same_preds). Off: only equal arrays are (as before; the
# oracle of tests/taskrt/test_same_preds.py).
SAME_PRED_SETS = True

_first, _second = itemgetter(0), itemgetter(1)


class Planner:
    """Turns launches into a TaskGraph. Use `plan()` for the common case."""

    def __init__(self, machine: Machine,
                 initial: Mapping[Region, Iterable[tuple[Rect, int]]] | None = None,
                 memo: RegionPlanMemo | None = None, replannable: bool = True):
        """`memo`: the region plans replace() remembers and takes back when a region's log
        comes back (regionmemo.py); when None, one of Settings.plan_memo_nodes (resolved
        now: TASKRT_PLAN_MEMO_NODES or the default), RegionPlanMemo(0) for none.
        `replannable=False`: a planner built once (plan()): it keeps no per-region log of
        the launches' accesses (what replace() replays), about a tenth of a large plan's
        memory, and replace() is refused."""
        self.machine = machine
        self.replannable = replannable
        # Launch records kept by region columns (TASK_COLUMNS; only where never re-planned).
        self.columns = not replannable and TASK_COLUMNS
        # Task groups built by columns whose predecessor arrays are made in batches
        # (taskcolumns.PendingPreds; flushed before launch_groups reads a group).
        self._pending = PendingPreds() if self.columns else None
        self.regions: dict[str, Region] = {}
        self.initial: dict[str, list[tuple[Rect, int]]] = {}
        self.planners: dict[str, RegionPlanner] = {}
        self.plans: list[LaunchPlan] = []             # per launch, in program order
        self.index: dict[str, int] = {}               # launch name -> its position
        self.region_nodes: dict[tuple[int, str], list] = {}
        # Per region: the launches touching it, with what they ask of it, for re-planning.
        self.log: dict[str, list[tuple]] = defaultdict(list)
        self._tasks: dict[tuple[int, int], TaskNode] = {}   # reused while targets are unchanged
        self._task_memo: dict[tuple, TaskNode] = {}       # see _task_node
        # Per region: what finish() copies into the graph, kept until the region is planned
        # again (names in _dirty).
        self._region_info: dict[str, tuple] = {}
        self._dirty: set[str] = set()
        # Node groups (nodegroups.py) by key: (launch index, region name) for a launch's
        # read nodes of a region, (launch index, None) for its tasks; a stable id per key.
        self._groups: dict[tuple, NodeGroup] = {}
        self._gids: dict[tuple, int] = {}
        self._stale: set[tuple] = set()               # keys of groups to rebuild
        self._marked: set[tuple] = set()              # keys made stale since replace() began
        self._undo: PlanUndo | None = None            # see replace(record_undo=True)
        # Launch name -> the launches (indices) taking state named by it (_state_takers).
        self._state_index: dict[str, list[int]] | None = None
        self._next_version = 0                        # the next LaunchPlan.version
        # The launch given each version, from version _log_start on (see versions_since).
        self._version_log: list[int] = []
        self._log_start = 0
        self.memo = RegionPlanMemo(Settings.resolve().plan_memo_nodes) if memo is None \
            else memo
        # Read groups by the node list they were built from (id -> (list, group)): a region
        # plan taken back from the memo brings its lists, and so its groups, back.
        self._read_groups: dict[int, tuple[list, NodeGroup]] = {}
        # While add_launches() adds launches: the regions planned alike (regionclasses.py).
        self._classes: RegionClasses | None = None
        # The RegionPlanners that may be shared: by regions planned alike, or with a
        # remembered plan. Nothing plans further into one (regionplans.own_planner). Weak: a one-shot
        # plan drops a class's planner once its members are planned.
        self._frozen: weakref.WeakSet = weakref.WeakSet()
        # id(frozen RegionPlanner) -> (a weak ref to it, graphview.region_info of it): shared by its regions.
        self._frozen_info: dict[int, tuple] = {}
        # Class members whose plan is their template's moved along whole dimensions (one-shot:
        # regionshapes.py): region -> the rect mover, for their end state (oneshot.py).
        self._shifted: dict = {}
        self._moved_info: dict = {}     # (id(planner), rect) -> (weak ref, moved info)
        fine: set = set()                             # (check_initial's, while we run)
        for region, pieces in (initial or {}).items():
            self._region(region)
            self.initial[region.name] = list(pieces)
            if replannable:
                self.planners[region.name] = RegionPlanner(region, machine,
                                                           self.initial[region.name])
                self._dirty.add(region.name)
            else:
                # Made at the region's first launch (_planner): a one-shot plan of a model's
                # weights and optimizer state on many devices would otherwise hold every
                # region's initial state from the start (an optimizer's state is touched
                # only by the last launches). Checked now as RegionPlanner checks it.
                check_initial(region, self.initial[region.name], machine, fine)
                self.planners[region.name] = None

    # -- bookkeeping ---------------------------------------------------------------------
    @property
    def launches(self) -> list[IndexLaunch]:
        """The launches, in program order."""
        return [lp.launch for lp in self.plans]

    @property
    def versions(self) -> list[int]:
        """Per launch: a number that changes whenever one of its groups is rebuilt or put
        back, so a consumer caching per-launch results (delta.py) sees what changed."""
        return [lp.version for lp in self.plans]

    @property
    def next_version(self) -> int:
        """The version the next changed launch will get (a mark for versions_since)."""
        return self._next_version

    def versions_since(self, mark: int) -> list[int] | None:
        """The launches (ascending) given a new version since next_version was `mark`, or
        None when that is too long ago to say (then compare `versions`)."""
        if mark < self._log_start:
            return None
        return sorted(set(self._version_log[mark - self._log_start:]))

    def _region(self, region: Region) -> RegionPlanner | None:
        known = self.regions.get(region.name)
        if known is None:
            self.regions[region.name] = region
        elif known is not region and known != region:
            raise PlanError(f"Region '{region.name}' is declared twice with different "
                            f"shapes or dtypes ({known.shape} {known.dtype} vs "
                            f"{region.shape} {region.dtype}). Give regions unique names.")
        return self.planners.get(region.name)

    def _planner(self, name: str) -> RegionPlanner:
        rp = self.planners.get(name)
        if rp is None:
            if name in self._region_info and not self.replannable:
                raise PlanError(f"Region '{name}' is used after the launch planned as its "
                                "last (oneshot.py): a one-shot plan must be given all its "
                                "launches at once.")
            rp = self.planners[name] = RegionPlanner(self.regions[name], self.machine,
                                                     self.initial.get(name, ()))
            self._dirty.add(name)
        return rp

    # -- adding launches -------------------------------------------------------------------
    def add_launches(self, launches: Iterable[IndexLaunch]) -> None:
        """add_launch for each of `launches`, in program order, with regions that are planned
        alike planned once (regionclasses.py): the same graph, for a fraction of the work
        when the model repeats itself."""
        launches = list(launches)
        expanded = [self._expand(launch) for launch in launches]
        classes = self._classes = RegionClasses.find(self, launches, expanded, len(self.plans))
        try:
            for launch, points in zip(launches, expanded):
                li = len(self.plans)
                self.add_launch(launch, points)
                classes.release(li)
        finally:
            self._classes = None

    def touched_before(self, name: str) -> bool:
        """Whether a launch added so far touched region `name`."""
        if self.replannable:
            return bool(self.log.get(name))
        return self.planners.get(name) is not None or name in self._region_info

    def add_launch(self, launch: IndexLaunch, points: list | None = None) -> None:
        """Plan `launch` after the launches added so far (`points`: its _expand(), when
        already made)."""
        if launch.name in self.index:
            raise PlanError(f"Launch '{launch.name}' added twice. Give launches unique names.")
        self._undo = None
        li = len(self.plans)
        if points is None:
            points = self._expand(launch)
        alike = self._classes
        if alike is None:
            check_interference(launch, points)
        elif not alike.free_of_interference(li):
            check_interference(launch, points)
            alike.found_free(li)
        state_src = self._state_sources(launch, points) if launch.state_from else \
            [None] * len(points)
        reads, accesses = by_region(points) if alike is None else alike.grouped(li)
        classes = self._classes if self._classes else None
        if self._frozen:
            for name in accesses:
                if name not in (classes or ()):
                    own_planner(self, name)
        self.plans.append(LaunchPlan(launch, points, reads, accesses, state_src,
                                     columns=self.columns))
        self.index[launch.name] = li
        self._state_index = None
        self._mark((li, None))
        if self.replannable:
            for name in accesses:
                entry = (li, reads.get(name), accesses[name])
                self.log[name].append(entry)
        for name in reads:
            if classes is None or name not in classes:
                self._plan_reads(self._planner(name), name, li, reads[name])
        for name, acc in accesses.items():
            if classes is not None and name in classes:
                install(self, name, li, acc, *classes.next_entry(name, li))
            else:
                self._plan_accesses(self._planner(name), name, li, acc)

    def _mark(self, key: tuple) -> None:
        self._stale.add(key)
        self._marked.add(key)

    def _plan_reads(self, rp: RegionPlanner, name: str, li: int, reads) -> None:
        self._dirty.add(name)
        self._mark((li, name))
        self.region_nodes[li, name] = rp.plan_reads(self.plans[li].launch, reads)

    def _plan_accesses(self, rp: RegionPlanner, name: str, li: int, accesses) -> None:
        self._dirty.add(name)
        self._mark((li, None))
        lp = self.plans[li]
        task_preds, task_targets = lp.task_preds, lp.task_targets
        refs = lp.refs or task_refs(lp, li)
        planned = rp.access_points(refs, lp.points, accesses, lp.launch.replicas)
        if lp.columns is not None:
            lp.columns.append((accesses, merged_per_point(accesses, planned), None))
            return
        for (pi, k, _), (preds, targets) in zip(accesses, planned):
            # Kept as a tuple (a set costs 216 bytes however few it holds; a point's preds
            # per region are a few refs), in the set's order.
            per_region = task_preds[pi]
            known = per_region.get(name)
            per_region[name] = (tuple(preds) if preds else ()) if known is None else \
                tuple(set(known).union(preds))
            task_targets[pi][k] = targets

    def _expand(self, launch: IndexLaunch):
        """The launch's points [(color, device, requirements)], its regions made known
        (expand.py)."""
        return expand(self, launch)

    def _device_of(self, launch: IndexLaunch, index: int) -> int:
        """The device of point `index`: the launch's own (a strategy's placement), else
        points spread over the machine in blocks."""
        if launch.devices is not None:
            return launch.devices[index]
        return index * len(self.machine.devices) // len(launch.colors)

    def _state_sources(self, launch: IndexLaunch, points) -> list:
        """Per point the task ref it takes state from: the point of launch.state_from of
        the same color, which must be on the same device. A backward's points are its
        forward's, color by color in the same order on the same devices: then the refs
        are the source's in order (C comparisons of the colors and devices, no lookup
        per point); else, or to find the first error, point by point."""
        li = self.index.get(launch.state_from)
        if li is None:
            raise PlanError(f"Launch '{launch.name}': state_from='{launch.state_from}' names "
                            "no earlier launch. Add that launch first.")
        source = self.plans[li]
        theirs = source.points
        if len(theirs) == len(points) and \
                list(map(_first, theirs)) == list(map(_first, points)) and \
                list(map(_second, theirs)) == list(map(_second, points)):
            return list(source.refs) if source.refs else \
                list(zip(repeat(li), range(len(points))))
        out = []
        colors = {c: k for k, (c, _, _) in enumerate(theirs)}      # color -> point index
        for color, device, _ in points:
            pi = colors.get(color)
            if pi is None:
                raise PlanError(f"Launch '{launch.name}' point {color}: launch "
                                f"'{launch.state_from}' has no such point to take state from.")
            src_device = theirs[pi][1]
            if src_device != device:
                raise MappingError(f"Launch '{launch.name}' point {color} is on device {device} "
                                   f"but its state is on device {src_device} (from "
                                   f"'{launch.state_from}'). Map both launches' points alike.")
            out.append(source.refs[pi] if source.refs else (li, pi))
        return out

    # -- the graph ---------------------------------------------------------------------------
    def _gid(self, key: tuple) -> int:
        gid = self._gids.get(key)
        if gid is None:
            gid = self._gids[key] = len(self._gids)
        return gid

    @property
    def num_group_ids(self) -> int:
        return len(self._gids)

    def _build_reads(self, key: tuple) -> NodeGroup | None:
        items = self.region_nodes.get(key)
        if items is None:
            return None
        if type(items) is StampedReads:         # (a class member's, by arrays)
            return items.group(self, key)
        if not items:
            # (no nodes: the group of before if it had none either, so that the launch
            # gets no new version for it; launch_groups skips empty groups)
            old = self._groups.get(key)
            if old is not None and not old.nodes:
                return old
        built = self._read_groups.get(id(items))
        if built is not None and built[0] is items:
            return built[1]
        if type(items) is MovedReads:           # (moved from a template's: by arrays)
            group = items.group(self, key)
            if self.memo.max_nodes:
                self._read_groups[id(items)] = (items, group)
            return group
        gid = self._gid(key)
        nodes = [item[0] for item in items]
        for idx, node in enumerate(nodes):
            node.where = (gid, idx)
        # Predecessor refs as (group id, index) pairs, each node's once, in one loop: a
        # task ref (launch, point) is point `point` of that launch's task group (its id
        # looked up once per launch); a node is where its group put it (this group's
        # nodes: just above).
        preds = []
        task_gid: dict = {}
        gid_of = self._gid
        for node, refs, _ in items:
            out = set()
            for r in refs:
                if type(r) is tuple:
                    g = task_gid.get(r[0])
                    if g is None:
                        g = task_gid[r[0]] = gid_of((r[0], None))
                    out.add((g, r[1]))
                elif r is not None and r is not node:
                    out.add(r.where)
            preds.append(out)          # (NodeGroup.of reads a set as the list of it)
        staged = [item[2] for item in items]
        group = NodeGroup.of(key, gid, nodes, preds,
                             staged if any(st is not None for st in staged) else None)
        # A group depends only on its nodes (their refs are to this region's nodes, whose
        # places are stable per key, and to tasks by point), so it is kept with its list
        # while a memo may hand that list back (emptied with the memo; none without one).
        if self.memo.max_nodes:
            self._read_groups[id(items)] = (items, group)
        return group

    def _build_tasks(self, key: tuple) -> NodeGroup:
        li = key[0]
        lp = self.plans[li]
        if lp.columns is not None:
            return self._build_columns(key, lp)
        launch, preds_of, targets_of, state_src = lp.launch, lp.task_preds, lp.task_targets, \
            lp.state_src
        nodes, preds = [], []
        task_gid: dict[int, int] = {}     # launch index -> its task group's id
        gid_of = self._gid
        tasks = self._tasks
        # A planner that is never re-planned builds each launch's tasks once (add_launch
        # marks only the new launch's, replace() is refused): no node to reuse or keep.
        once = not self.replannable
        for pi, (color, device, reqs) in enumerate(lp.points):
            # The preds resolved as _build_reads does, with each launch's task group id looked
            # up once rather than once per ref.
            out = set()
            for p in preds_of[pi].values():
                for r in p:
                    if type(r) is tuple:
                        l, q = r
                        if q == pi and l == li:
                            continue
                        g = task_gid.get(l)
                        if g is None:
                            g = task_gid[l] = gid_of((l, None))
                        out.add((g, q))
                    elif r is not None:
                        out.add(r.where)
            src = state_src[pi]
            if src is not None and src != (li, pi):
                out.add((gid_of((src[0], None)), src[1]))
            targets = tuple(targets_of[pi])
            preds.append(out)           # (NodeGroup.of reads a set as the list of it)
            if once:
                nodes.append(TaskNode(-1, launch, color, device, reqs, targets))
                continue
            node = tasks.get((li, pi))
            if node is None or node.targets != targets:
                node = self._task_node(launch, pi, color, device, reqs, targets)
                self._set_task((li, pi), node)
            nodes.append(node)
        group = NodeGroup.of(key, gid_of(key), nodes, preds)
        # A re-plan marks every task group of a region's launches, and most come out as
        # they were (the same task objects and predecessors, as sets: the order a set
        # lists its pairs in may differ): then the group of before is kept, so that
        # refresh() gives the launch no new version (delta.py rebuilds and re-times only
        # launches with new versions).
        old = None if once else self._groups.get(key)
        if old is not None and len(old.nodes) == len(nodes) and \
                all(a is b for a, b in zip(old.nodes, nodes)) and \
                same_preds(old, group, any_order=SAME_PRED_SETS):
            return old
        return group

    def _build_columns(self, key: tuple, lp) -> NodeGroup:
        """_build_tasks for a launch record kept by columns (a planner never re-planned):
        taskcolumns.py, with the compiled columns of class templates kept while
        plan_once's classes are."""
        classes = self._classes
        return build_task_group(self, key, lp, classes.compiled if classes else None,
                                self._pending)

    def _new_version(self, li: int) -> None:
        self.plans[li].version = self._next_version
        self._next_version += 1
        log = self._version_log
        log.append(li)
        if len(log) > 4 * len(self.plans) + 1024:        # keep the newest half
            drop = len(log) // 2
            del log[:drop]
            self._log_start += drop

    def refresh(self) -> None:
        """Rebuild the groups that changes made stale, in program order (a group resolves
        references to the groups before it), giving a new version to each launch whose
        groups are not all the very objects of before (a rebuilt group that comes out as
        it was is the old object: _build_tasks, and _build_reads for a remembered plan)."""
        if not self._stale:
            return
        groups, bumped = self._groups, -1
        for key in sorted(self._stale, key=lambda k: (k[0], k[1] is None)):
            if key[0] >= len(self.plans):
                continue
            group = self._build_reads(key) if key[1] is not None else self._build_tasks(key)
            if group is groups.get(key):
                continue
            if group is None:
                del groups[key]
            else:
                groups[key] = group
            if key[0] != bumped:
                bumped = key[0]
                self._new_version(bumped)
        self._stale.clear()

    @property
    def num_remembered_groups(self) -> int:
        """len(remembered_groups()), without making the list."""
        return len(self._read_groups)

    def remembered_groups(self) -> list[NodeGroup]:
        """The read groups this planner may hand out again (the current ones and those of
        region plans its memo remembers), for a consumer that caches per group."""
        return [group for _, group in self._read_groups.values()]

    def launch_groups(self, li: int) -> list[NodeGroup]:
        """Launch `li`'s non-empty groups in program order (after refresh())."""
        if self._pending:
            self._pending.flush()
        groups = self._groups
        out = [g for name in self.plans[li].read_order if (g := groups[li, name]).nodes]
        out.append(groups[li, None])
        return out

    def groups(self) -> list[NodeGroup]:
        """The graph's non-empty node groups in program order (nodegroups.py)."""
        self.refresh()
        out = []
        for li in range(len(self.plans)):
            out += self.launch_groups(li)
        return out

    def finish(self, release: bool = False) -> TaskGraph:
        """The TaskGraph of the launches planned so far: the object view of `groups()`, with
        ids, sorted predecessor and successor lists, and each region's buffers and valid
        pieces (graphview.py). Node objects that did not change are the same as in the
        previous graph (with their new ids), so only the latest graph of a planner is valid.
        `release`: the planner is not used again (plan()): its per-region and per-launch
        state is dropped once read, before the graph's edge lists are made, so that the
        two are not held at once at the peak of a large plan."""
        return graph_of(self, release)

    # -- changing launches (replanning.py) ----------------------------------------------------
    def replace(self, launches: Sequence[IndexLaunch],
                initial: Mapping[Region, Iterable[tuple[Rect, int]]] | None = None,
                record_undo: bool = False) -> set[str]:
        """New versions of existing launches (and initial data), their regions re-planned;
        returns those regions (replanning.replace)."""
        return replanning.replace(self, launches, initial, record_undo)

    def _task_node(self, launch: IndexLaunch, pi: int, color, device: int, reqs,
                   targets: tuple) -> TaskNode:
        """Point `pi` of `launch` with these Red+ targets: the node made for them before
        while the memo remembers (a search that comes back to a config gets the launch
        objects of then from its lowering, and so the same nodes, whose simulated costs
        the simulator keeps), else a new one."""
        if not self.memo.max_nodes:
            return TaskNode(-1, launch, color, device, reqs, targets)
        memo = self._task_memo
        key = (launch, pi, targets)
        node = memo.get(key)
        if node is None:
            if len(memo) >= self.memo.max_nodes:
                memo.clear()
            node = memo[key] = TaskNode(-1, launch, color, device, reqs, targets)
        return node

    def _set_task(self, key: tuple, node: TaskNode | None) -> None:
        """_tasks[key] = node (None: no entry), noted for undo() while one is recorded."""
        if self._undo is not None:
            self._undo.tasks.setdefault(key, self._tasks.get(key))
        if node is None:
            self._tasks.pop(key, None)
        else:
            self._tasks[key] = node

    @property
    def can_undo(self) -> bool:
        return self._undo is not None

    def undo(self) -> None:
        """Take the planner back to its state before the last `replace(..., record_undo=True)`
        (the next finish() gives the graph of then again, with the same node objects)."""
        replanning.undo(self)

def plan(launches: Sequence[IndexLaunch], machine: Machine,
         initial: Mapping[Region, Iterable[tuple[Rect, int]]] | None = None) -> TaskGraph:
    """Plan launches, in program order, into a TaskGraph.

    `initial` says which (rect, device) pieces of which regions hold data before the first
    launch (inputs and weights); reading anything else before it is written is an error.
    """
    with gc_paused():
        # Built once: no log, no memo of region plans or task nodes (they serve replace()).
        p = Planner(machine, initial, memo=RegionPlanMemo(0), replannable=False)
        plan_once(p, launches)       # (oneshot.py: state dropped as soon as it is done with)
        return p.finish(release=True)
