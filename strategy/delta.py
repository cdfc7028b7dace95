"""SimulationSession: a strategy's launches, plan and simulated timeline, kept up to date
when one operator's configuration changes (delta simulation, the search's inner loop).

A change re-lowers only that operator (parallel_ops.lowering.IncrementalLowering), re-plans
only the regions its launches touch (taskrt.Planner.replace), which rebuilds only the node
groups of the launches using those regions (taskrt/nodegroups.py). Everything the simulator
needs per node (duration, resources, buffers used) is kept per group as arrays; a launch's
groups are a block (rebuilt when the planner gives the launch a new version), and the groups'
arrays are joined over all launches (strategy/launchblocks.py: spliced where blocks changed,
joined again straight from the groups when many did), so a new graph's arrays cost
O(changed launches) of Python, its node ids are resolved in bulk, and the timeline re-timed
by the compiled list scheduler (strategy/listsched.py) from its last checkpoint before the
first changed launch (in program order nothing before a node changes what it sees:
listsched.Checkpoints), and the memory peak by one compiled sweep of sorted allocation events
(strategy/memsweep.py). An undo puts back the blocks, joined arrays, checkpoints and the
memory table's persistent sums of before the change (_blocks_back: the search undoes most
proposals), so the next change rebuilds only its own launches' blocks and resumes at its own
first launch, not at the undo's.
For a new group, what a copy's devices and bytes, a reduce's device and bytes or a task's
class and device determine is computed once per such key (strategy/readgroups.py,
strategy/taskgroups.py). No per-node Python runs for the
groups a change did not touch, and the result is by construction what a full
simulation of the new graph gives (tests/strategy/test_delta.py checks it). The TaskGraph
object view (`graph`) is built only when asked for. change_timed() stops before the memory
peak (the search rejects most proposals on their time alone: strategy/search.py, "Memory
last"); complete() computes it, undo() takes the change back without it.
"""
from __future__ import annotations

import weakref
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from parallel_ops.lowering import IncrementalLowering
from parallel_ops.optim import SGD
from taskrt import Planner
from taskrt.gcpause import gc_paused
from taskrt.liveness import INSTANCE, PARTIAL, results_of
from taskrt.nodegroups import join, resolve

from .delta_memory import BufferTable
from .launchblocks import RUN_ARRAYS, SIM_ARRAYS, Joined, LaunchBlock
from .listsched import Checkpoints
from .simulator import NodeTimer, Resources, SimResult, busy_of, result_of, timeline
from .readgroups import ReadGroups
from .taskgroups import HOST_ARRAYS, GroupSim, TaskGroups

# Buffers the tables may hold beyond 4 per node of the graph and one per node the planner's
# memo remembers (a remembered copy brings its staging buffer back) before a restart.
TABLE_SLACK = 65536
# Joined arrays are spliced when at most this share of the launches changed, else joined
# again from every group (strategy/launchblocks.py).
SPLICE_SHARE = 0.25


@dataclass(slots=True)
class _SimState:
    """What a change's _simulate replaced in the session's bookkeeping (the launch blocks it
    rebuilt, the joined arrays, the timeline's checkpoints), so that undo() puts it back
    instead of the next change rebuilding the blocks the undo gave new versions, and the
    next timeline resumes at that change's first launch."""
    epoch: int
    blocks: dict                 # launch index -> its block before the change
    num_blocks: int
    joined: "Joined | None"
    checkpoints: tuple | None   # listsched.Checkpoints.before of the change's run
    live_nodes: int


def _count(counts: dict, names, step: int) -> None:
    """Add `step` to the count of each name, keeping only counts above 0."""
    for name in names:
        c = counts.get(name, 0) + step
        if c > 0:
            counts[name] = c
        else:
            del counts[name]


class SimulationSession:
    def __init__(self, model, machine_model, costs, strategy=None, optimizer=None):
        self.model, self.machine_model, self.costs = model, machine_model, costs
        self.machine = machine_model.taskrt_machine()
        with gc_paused(long_lived=True):     # the session lives on: taskrt/gcpause.py
            self.lowering = IncrementalLowering(model, strategy, self.machine,
                                                optimizer or SGD(lr=0.1, momentum=0.9))
            lowered = self.lowering.lowered()
            self.planner = Planner(self.machine, initial=lowered.initial)
            self.planner.add_launches(lowered.launches)
            self.timer = NodeTimer(machine_model, costs)
            self.resources = Resources()
            self._epoch = 0
            self._reset_tables()
            self._graph = None
            self._undo: tuple | None = None       # what change() replaced, for undo()
            # change_timed's graph until complete(): (touched, start, end, (busy by resource
            # id, res_ids, host): simulator.busy_of's, run)
            self._pending: tuple | None = None
            self.result = self._simulate(None)

    def _reset_tables(self) -> None:
        """Empty the per-node, per-group and per-buffer tables. Every change makes new
        staging buffers (keyed by their copy node), so the tables grow; _simulate starts
        them again from the current graph when they hold several graphs' worth."""
        self._epoch += 1
        self._sims: dict = {}            # NodeGroup -> GroupSim
        self._buffers = BufferTable(len(self.machine.devices))   # buffers as dense ids
        # Whether the table holds every region's buffers (set by a _memory over all of them;
        # until then, a _memory sets all regions whatever a change touched: an undo of a
        # change_timed whose simulation started the tables again leaves them partial).
        self._all_regions = False
        # Task groups' arrays (strategy/taskgroups.py), per task class and device; read
        # groups' (strategy/readgroups.py), per copy and reduce timing key.
        self._task_groups = TaskGroups(self.machine_model, self.timer, self.resources,
                                       self._buffers)
        self._read_groups = ReadGroups(self.timer, self.resources, self._buffers)
        # Per launch, its groups and their GroupSims (LaunchBlock), and over all of them the
        # counts of regions read by writing tasks (see _kept_regions; only counts above 0).
        self._blocks: list[LaunchBlock] = []
        self._joined: Joined | None = None
        self._version_mark = 0                       # Planner.next_version when last synced
        self._num_block_sims = 0                     # sum(len(b.sims) for b in _blocks)
        self._read_by_writers: dict[str, int] = {}
        # The last timeline's resource states, and how many of its first nodes the graph
        # _blocks_now gave keeps (listsched.Checkpoints: a run resumes there).
        self._checkpoints = Checkpoints(0, 0)
        self._first_changed = 0
        # region -> {id of a set of regions: [the set, how many writers' GroupSims read
        # it]}: the reads of the tasks writing the region (a task group's shape shares
        # its sets: strategy/taskgroups.py)
        self._writers_of: dict = defaultdict(dict)
        self._live_nodes = 0
        # _kept_regions's last answer: (_counts_changed and the buffer table's
        # initial_changes then, the planner's region names it was for, the answer);
        # _counts_changed: how many times _count_block changed the counts it reads
        self._kept_answer: tuple | None = None
        self._counts_changed = 0
        self._replaced: dict | None = None    # while a change simulates: _SimState.blocks
        # (id of a frozen RegionPlanner, region name) -> (a weak reference to it, its
        # buffers' arrays: _region_buffer_arrays)
        self._frozen_buffers: dict = {}

    @property
    def configs(self):
        return self.lowering.configs

    @property
    def graph(self):
        """The TaskGraph of the current strategy (built on first use after a change; node ids
        index result.start and result.end)."""
        if self._graph is None:
            with gc_paused():
                self._graph = self.planner.finish()
        return self._graph

    def change(self, op_name: str, config) -> SimResult:
        """Give one operator another config and return the new simulation result. `undo()`
        takes it back. On an error (a config that does not fit) the session is as before."""
        return self.change_all([(op_name, config)])

    def change_all(self, changes) -> SimResult:
        """Give several operators other configs at once ([(op name, config)], distinct
        operators) and return the new simulation result: what change() of each in turn
        gives, with the regions they touch re-planned once and one simulation (a pair move's
        two neighbours share their tensor's regions). `undo()` takes them all back. On an
        error the session is as before."""
        self._change_all(changes, True)
        return self.result

    def change_timed(self, changes) -> float:
        """change_all(changes) but for the memory peak: the new graph's span (when its last
        node ends: its makespan when it fits in memory; strategy/search.py's rank is never
        below it). complete() then gives the SimResult change_all gives (its peak computed
        then), or undo() takes the change back (the peak never computed: most proposals of
        a search are rejected on their time alone). Until one of the two, `result` is
        None."""
        self._change_all(changes, False)
        start, end = self._pending[1], self._pending[2]
        return float(np.max(end)) if len(end) else 0.0

    def complete(self) -> SimResult:
        """The SimResult of the graph change_timed made (its memory peak computed now, as
        change_all computes it); the current result when no change waits for it."""
        if self._pending is not None:
            touched, start, end, busy, run = self._pending
            self._pending = None
            if self._undo is not None:
                self._note_regions(self._undo[2], touched)
            with gc_paused():
                memory = self._memory(touched, start, end)
            self.result = result_of(self.machine_model, start, end,
                                    busy_of(self.resources, *busy), memory, run)
        return self.result

    def _change_all(self, changes, memory: bool) -> None:
        self.complete()            # (a change_timed not completed nor undone: its peak)
        lowering = self.lowering
        olds = [(name, lowering.configs[name], lowering.parts[name]) for name, _ in changes]
        if len({name for name, _, _ in olds}) != len(olds):
            raise ValueError("SimulationSession.change_all: an operator named twice in "
                             f"{[name for name, _ in changes]}; give each one config.")
        before = (olds, self.result, {}, self._epoch, self._buffers.persistent_mark(), None)
        self._undo = None
        replaced = False
        with gc_paused():
            try:
                launches, names = [], set()
                for op_name, config in changes:
                    part = lowering.change(op_name, config)
                    launches += part.forward + part.backward + list(part.updates.values())
                    names |= set(part.initial_forward) | set(part.initial_update)
                initial = lowering.initial_of(names)
                replaced = True
                touched = self.planner.replace(launches, initial, record_undo=True)
                if memory:      # (else complete() notes them: a timed change undone
                    self._note_regions(before[2], touched)   # before its peak set none)
                self._graph = None
                state = _SimState(self._epoch, {}, len(self._blocks), self._joined, None,
                                  self._live_nodes)
                self._replaced = state.blocks
                self._checkpoints.before = None
                try:
                    self.result = self._simulate(touched, memory)
                finally:
                    self._replaced = None
                state.checkpoints = self._checkpoints.before
            except BaseException:
                self._pending = None
                self._restore(before, replaced)
                raise
        self._undo = before[:5] + (state,)

    def _note_regions(self, region_buffers: dict, touched) -> None:
        """Note the buffer table's entries of the regions in `touched` before _memory sets
        them, for _restore (`region_buffers`: the change's undo record's)."""
        regions = self._buffers.regions
        region_buffers.update((name, regions.get(name)) for name in touched)

    def undo(self) -> SimResult:
        """Take back the last change() or change_all(): the plan, result and configs before
        it."""
        if self._undo is None:
            raise ValueError("SimulationSession.undo: no change to take back (one level).")
        before, self._undo, self._pending = self._undo, None, None
        with gc_paused():
            self._restore(before, True)
        return self.result

    def _restore(self, before, replaced: bool) -> None:
        olds, result, region_buffers, epoch, mark, state = before
        for op_name, cfg, part in reversed(olds):
            self.lowering.restore(op_name, cfg, part)
        if replaced and self.planner.can_undo:
            self.planner.undo()
            if state is not None:
                self._blocks_back(state)
        same = epoch == self._epoch             # else the tables were started again since
        table, initial = self._buffers, self.planner.initial
        for name, entry in region_buffers.items() if same or self._all_regions else ():
            if not same:
                entry = self._region_buffer_arrays(name)
            table.set_region(name, entry, bool(initial.get(name)), persistent=not same)
        if same:
            table.put_back_persistent(mark)
        # The graph object of before is not reused: a later finish() gave its nodes new ids.
        self.result, self._graph = result, None

    def _blocks_back(self, state: _SimState) -> None:
        """After the planner's undo: put back the blocks, joined arrays and checkpoints of
        before the change, when the undo gave new versions to exactly the launches the
        change rebuilt and their groups are again the very groups of the blocks of before
        (else nothing: the next _blocks_now rebuilds what changed, as for any change)."""
        planner = self.planner
        planner.refresh()
        since = planner.versions_since(self._version_mark)
        if state.epoch != self._epoch or since is None or \
                len(self._blocks) != state.num_blocks or set(since) != state.blocks.keys():
            return
        for li, block in state.blocks.items():
            groups = planner.launch_groups(li)
            if len(groups) != len(block.groups) or \
                    any(a is not b for a, b in zip(groups, block.groups)):
                return
        for li, block in state.blocks.items():
            block.version = planner.plans[li].version
            self._put_block(li, block)
        self._version_mark = planner.next_version
        self._joined = state.joined
        self._checkpoints.restore(state.checkpoints)
        self._live_nodes = state.live_nodes

    def full(self) -> SimResult:
        """A from-scratch simulation of the current graph (for checking delta results)."""
        from .simulator import simulate
        return simulate(self.graph, self.machine_model, self.costs,
                        NodeTimer(self.machine_model, self.costs))

    # -- per group ---------------------------------------------------------------------------
    def _group_sim(self, group) -> GroupSim:
        """The group's arrays: a launch's point tasks over the group as arrays, per task
        class and device (strategy/taskgroups.py); a region's read nodes in one loop, what
        a copy's or a reduce's timing depends on computed once per such key
        (strategy/readgroups.py)."""
        if group.key[1] is None:
            return self._task_groups.sim(group)
        return self._read_groups.sim(group)

    def _region_buffer_arrays(self, name: str) -> tuple | None:
        """Region `name`'s instance and partial-sum buffers (ids, devices, bytes), or None
        when the planner has no such region (any more)."""
        planner = self.planner
        rp = planner.planners.get(name)
        if rp is None:
            return None
        # A frozen RegionPlanner (shared by regions planned alike or with the plan memo) is
        # never planned further (taskrt/regionplans.py own_planner), so its buffers are
        # known by (its id, the region's name), with a weak reference against a reused id
        # (as taskrt.graphview.region_info's).
        frozen = rp in planner._frozen
        if frozen:
            known = self._frozen_buffers.get((id(rp), name))
            if known is not None and known[0]() is rp:
                return known[1]
        got = self._buffer_arrays_of(rp, name)
        if frozen:
            if len(self._frozen_buffers) > TABLE_SLACK:
                self._frozen_buffers = {}
            self._frozen_buffers[(id(rp), name)] = (weakref.ref(rp), got)
        return got

    def _buffer_arrays_of(self, rp, name: str) -> tuple:
        ids, devs, sizes = [], [], []
        nbytes, on = rp.region.nbytes, self._buffers.ids_on_rows
        for kind, rects in ((INSTANCE, rp.instance_rects), (PARTIAL, rp.partial_rects)):
            if rects:
                d = np.fromiter(rects, dtype=np.int64, count=len(rects))
                ids.append(on(((kind, name),), d)[0])
                devs.append(d)
                sizes.append(np.fromiter(map(nbytes, rects.values()), dtype=np.int64,
                                         count=len(rects)))
        if not ids:
            return tuple(np.zeros(0, dtype=np.int64) for _ in range(3))
        return tuple(join(x) for x in (ids, devs, sizes))

    # -- the simulation ------------------------------------------------------------------------
    def _block(self, li: int, version: int) -> LaunchBlock:
        sims = self._sims
        groups = self.planner.launch_groups(li)
        per = []
        for g in groups:
            s = sims.get(g)
            if s is None:
                s = sims[g] = self._group_sim(g)
            per.append(s)
        return LaunchBlock.of(version, groups, per)

    def _blocks_now(self) -> list:
        """The current graph's launch blocks, rebuilt for the launches whose groups changed,
        with their arrays joined (self._joined) and the counts _kept_regions needs updated
        for the groups that came and went."""
        planner = self.planner
        planner.refresh()
        blocks = self._blocks
        known = len(blocks)
        changed = []
        since = planner.versions_since(self._version_mark) if known else None
        self._version_mark = planner.next_version
        first_block = known
        for li in (range(len(planner.plans)) if since is None else since):
            version = planner.plans[li].version
            if li < known and blocks[li].version == version:
                continue
            new = self._block(li, version)
            first_block = min(first_block, li)
            if li < known:
                changed.append(li)
                old = self._put_block(li, new)
                if self._replaced is not None:
                    self._replaced.setdefault(li, old)
            else:
                blocks.append(new)
                self._num_block_sims += len(new.sims)
                self._count_block(new, 1)
        # The nodes before the first changed launch are those of the last simulated graph.
        self._first_changed = 0 if self._joined is None else \
            int(self._joined.lens["dur"][:first_block].sum())
        if self._joined is None or len(blocks) != known or \
                len(changed) > SPLICE_SHARE * len(blocks):
            self._joined = Joined(blocks, SIM_ARRAYS + RUN_ARRAYS +
                                  (HOST_ARRAYS if self.timer.host_costs else ()))
        elif changed:
            self._joined = self._joined.spliced(blocks, changed)
        return blocks

    def _put_block(self, li: int, block: LaunchBlock) -> LaunchBlock:
        """Make `block` launch li's (returning the one it replaces), with the counts
        _kept_regions needs updated for the groups that came and went."""
        old, self._blocks[li] = self._blocks[li], block
        self._num_block_sims += len(block.sims) - len(old.sims)
        a, b = old.writers, block.writers
        # (GroupSims of the same reads, the very objects as a task group's shape shares
        # them (strategy/taskgroups.py): taking them away and adding them again changes
        # nothing)
        if len(a) != len(b) or any(x.read_by_writers is not y.read_by_writers or
                                   x.reads_of_writers is not y.reads_of_writers
                                   for x, y in zip(a, b)):
            self._count_block(old, -1)
            self._count_block(block, 1)
        return old

    def _count_block(self, block: LaunchBlock, step: int) -> None:
        """Add (step 1) or take away (-1) the block's groups from the reads-by-writers
        counts and the writers' reads."""
        counts, writers = self._read_by_writers, self._writers_of
        self._counts_changed += 1
        for s in block.writers:
            _count(counts, s.read_by_writers, step)
            for written, reads in s.reads_of_writers.items():
                per = writers[written]
                got = per.get(id(reads))
                if got is None:
                    per[id(reads)] = [reads, step]
                elif got[1] + step:
                    got[1] += step
                else:
                    del per[id(reads)]

    def _simulate(self, touched, memory: bool = True) -> SimResult | None:
        """The current graph's SimResult; without `memory`, None, its timeline kept for
        complete() (self._pending)."""
        if len(self._buffers) > 4 * self._live_nodes + self.planner.memo.nodes + TABLE_SLACK:
            self._reset_tables()        # (the next _memory sets every region: _all_regions)
        blocks = self._blocks_now()
        if len(self._sims) > 2 * (self._num_block_sims +
                                  self.planner.num_remembered_groups) + 1024:
            # Forget the groups (and nodes) of older graphs, but for the read groups the
            # planner may take back with a remembered region plan (taskrt/regionmemo.py).
            old = self._sims
            self._sims = {g: sim for b in blocks for g, sim in zip(b.groups, b.sims)}
            self._sims.update((g, sim) for g in self.planner.remembered_groups()
                              if (sim := old.get(g)) is not None)
            infos = self._read_groups.infos
            if len(infos) > 4 * self._live_nodes + TABLE_SLACK:
                self._read_groups.infos = {n: t for b in blocks for g in b.groups
                                           for n in g.nodes if (t := infos.get(n)) is not None}
            if len(self._task_groups.class_of) > 4 * self._live_nodes + TABLE_SLACK:
                self._task_groups.forget_nodes()
        a, lens = self._joined.arrays, self._joined.lens
        asm = resolve(a["gids"], a["offsets"], lens["gids"], lens["dur"], a["pred_count"],
                      a["pred_gid"], a["pred_idx"], self.planner.num_group_ids)
        self._live_nodes = asm.num_nodes
        host = tuple(a[f] for f in HOST_ARRAYS) if self.timer.host_costs else None
        start, run, end, busy = timeline(a["dur"], a["res_counts"], a["res_ids"],
                                         asm.pred_ptr, asm.preds, self.resources, host,
                                         self.timer.ready_order, self._checkpoints,
                                         self._first_changed, named=False)
        # (busy by name only for a result: most timed changes are undone before theirs)
        busy = (busy, a["res_ids"], host)
        if not memory:
            self._pending = (touched, start, end, busy, run)
            return None
        memory = self._memory(touched, start, end)
        return result_of(self.machine_model, start, end, busy_of(self.resources, *busy),
                         memory, run)

    def _kept_regions(self) -> set[str]:
        """Regions whose buffers persist (taskrt.liveness.Liveness.of with keep=None): initial
        data, the graph's results (regions no writing task reads) and what the tasks writing
        a result read (from the counts _blocks_now keeps). The last answer while none of
        those changed (most changes of a search read and write the regions the old config
        did: the counts stay, and so do the regions)."""
        # (the region names as a list: equal lists of the same name objects compare by
        # identity, sets by hashing each name)
        regions, table = list(self.planner.regions), self._buffers
        last = self._kept_answer
        if last is not None and last[0] == self._counts_changed and \
                last[1] == table.initial_changes and last[2] == regions:
            return last[3]
        writers = self._writers_of
        kept = results_of(regions, self._read_by_writers,
                          lambda name: [r for r, _ in writers[name].values()]
                          if name in writers else ())
        kept |= table.initial_names
        self._kept_answer = (self._counts_changed, table.initial_changes, regions, kept)
        return kept

    def _memory(self, touched, start, end) -> dict[int, int]:
        """memory_per_device(self.graph, start, end): taskrt.liveness's model over arrays,
        the regions' buffers updated for the regions in `touched` (all when None)."""
        planner, table = self.planner, self._buffers
        if not self._all_regions:
            touched, self._all_regions = None, True
        for name in (planner.planners if touched is None else touched):
            table.set_region(name, self._region_buffer_arrays(name),
                             bool(planner.initial.get(name)))
        a = self._joined.arrays
        return table.peak(self._kept_regions(), a["buf_ids"], None, start, end,
                          user_counts=a["buf_counts"])
