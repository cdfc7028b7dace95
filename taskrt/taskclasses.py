"""TaskClasses: a graph's point tasks grouped by everything that decides their cost key,
their buffers (but for the device) and the regions they read and write.

Those are functions of a task's launch and, per requirement, the region's name, the
privilege and the part's shape, plus, for a Red+, where each piece of its contribution goes
(partial-sum buffer or instance, added onto sums or stored): TaskNode.cost_key,
bufferkeys.buffers_of, bufferkeys.task_reads_writes. Tasks equal in all of those form a class.
Whole-graph passes over a large graph (the simulator's timing, the memory model) ask those
per-node functions once per class, of its first task (`first`). Finding the classes is
itself done per run of consecutive tasks of one launch, column by column (the points of a
launch ask the same regions with the same privileges, and most parts have one shape): C-level
loops per task, a key per distinct combination of the shapes that vary, not a signature per
requirement per task. (GPT-3 2.7B's shape data parallel on 128 GPUs: 125,569 tasks in a few
hundred classes.)

Saved state (bufferkeys.state_key) depends on the task's color too: it is not part of the
class; the memory model asks it per task of a launch that keeps or takes state.
"""
from __future__ import annotations

from itertools import chain, compress, groupby, repeat
from operator import attrgetter, is_, itemgetter, methodcaller

import numpy as np

from .geometry import SHAPE_IF_ASKED
from .launch import RequirementsTable
from .taskgraph import TASK, NodeKind

# Per requirement: what decides its part of the class (names and codes hash in C; a
# Region's or Privilege's hash is Python code).
_SIGNATURE = attrgetter("region.name", "privilege.code", "rect.shape")
# Per Red+ target piece: (partial, accumulate) of ReduceTarget(piece, partial, accumulate).
_FLAGS = itemgetter(1, 2)
_PARTIAL, _ACCUMULATE = itemgetter(1), itemgetter(2)


def class_key(node) -> tuple:
    """What decides a point task's class: (launch, per requirement (region name, privilege
    code, part shape), per requirement None or its Red+ targets' (partial, accumulate))."""
    return (node.launch, tuple(map(_SIGNATURE, node.requirements)), _pattern(node.targets))


def _pattern(targets: tuple) -> tuple | None:
    """class_key's last part: None without a Red+, else per requirement None or its Red+
    targets' (partial, accumulate)."""
    if targets.count(None) == len(targets):
        return None
    return tuple([None if t is None else tuple(map(_FLAGS, t)) for t in targets])


def kind_codes(nodes) -> np.ndarray:
    """Per node its kind's code (KIND_CODE: TASK 0, COPY 1, REDUCE 2, ALLREDUCE 3), int8:
    one C pass reading each node's kind (by the members' ids: an enum's hash is Python
    code), the codes by numpy."""
    ids = np.fromiter(map(id, map(_KIND, nodes)), dtype=np.int64, count=len(nodes))
    codes = np.full(len(ids), -1, dtype=np.int8)
    for kind, code in KIND_CODE.items():
        codes[ids == id(kind)] = code
    return codes


KIND_CODE = {kind: code for code, kind in enumerate(NodeKind)}


class TaskClasses:
    """ids: the graph's task node ids, ascending; cls: per task, its class; device: per
    task, its device; first: per class, its first task node; others: the ids of the nodes
    that are not tasks, ascending; kinds: None, or per node its kind_codes (OtherColumns
    takes the others' from it: no second pass over 1.67M nodes' kinds);
    other_columns: None, or those nodes' OtherColumns (taskrt/othercolumns.py
    other_columns() makes it on first need)."""
    __slots__ = ("ids", "cls", "device", "first", "others", "kinds", "other_columns")

    def __init__(self, ids, cls, device, first, others, kinds=None):
        self.ids, self.cls, self.device, self.first, self.others = ids, cls, device, first, others
        self.kinds = kinds
        self.other_columns = None

    @classmethod
    def of(cls, nodes, kinds: np.ndarray | None = None) -> "TaskClasses":
        """The classes of `nodes` (a graph's nodes, node i at index i: ids are positions),
        numbered in order of their first task: class_key's classes, found per run of
        consecutive tasks of one launch (classes_of_run), not per task. `kinds`: the
        nodes' kind_codes where the caller has them (TaskGraph.node_kinds), else None."""
        if kinds is None or len(kinds) != len(nodes):
            kinds = kind_codes(nodes)
        flags = kinds == KIND_CODE[TASK]
        tasks = list(compress(nodes, flags.tolist()))
        classes: dict = {}
        first: list = []
        of: list[int] = []
        known: dict = {}
        for launch, run in groupby(tasks, _LAUNCH):
            of += classes_of_run(launch, list(run), classes, first, known)
        i8 = np.int64
        # (the ids by position: no second pass fetching 2.6M nodes' ids)
        return cls(np.flatnonzero(flags), np.array(of, dtype=i8),
                   np.array(list(map(_DEVICE, tasks)), dtype=i8), first,
                   np.flatnonzero(~flags), kinds)

    def __len__(self) -> int:
        return len(self.first)


def classes_of_run(launch, run: list, classes: dict, first: list,
                   known: dict | None = None) -> list[int]:
    """The classes (class_key's, numbered on in `classes` and `first` as a loop over the
    tasks would) of `run`, tasks of `launch`: _keys_of_run's keys of its tasks. A run whose
    tasks ask different numbers of requirements (Megatron's sharded attention and
    projection: a bias read by one shard of each group) is split by that number, each part
    taken column by column, and the new classes numbered in order of their first task (keys
    of different lengths differ). `known`: _column_shapes' results by table columns and
    _patterns' by targets tuples (_keys_of_run), for one TaskClasses.of, or None."""
    reqs_of = list(map(_REQUIREMENTS, run))
    lengths = list(map(len, reqs_of))
    if lengths.count(lengths[0]) == len(lengths):
        keys, at, local = _keys_of_run(launch, run, reqs_of, known)
        numbers = [_class_of(key, run[i], classes, first) for key, i in zip(keys, at)]
        return numbers * len(run) if local is None else list(map(numbers.__getitem__, local))
    parts = []      # per number of requirements: (positions, keys, first positions, local)
    by_length = np.array(lengths)
    for n in dict.fromkeys(lengths):
        where = np.flatnonzero(by_length == n)
        pos = where.tolist()
        keys, at, local = _keys_of_run(launch, [run[i] for i in pos],
                                       [reqs_of[i] for i in pos], known)
        parts.append((where, keys, [pos[i] for i in at], local))
    number = {}
    for i, key in sorted([(i, key) for _, keys, at, _ in parts for key, i in zip(keys, at)],
                         key=itemgetter(0)):
        number[key] = _class_of(key, run[i], classes, first)
    out = np.empty(len(run), dtype=np.int64)
    for where, keys, _, local in parts:
        numbers = np.array([number[key] for key in keys], dtype=np.int64)
        out[where] = numbers[0] if local is None else numbers[np.array(local, dtype=np.int64)]
    return out.tolist()


def _keys_of_run(launch, run: list, reqs_of: list, known: dict | None = None) -> tuple:
    """(keys, at, local): the distinct class_keys of `run` (tasks of `launch` asking as many
    requirements, `reqs_of` theirs) in order of their first task, those tasks' positions,
    and per task the index of its key (None when all have one): per requirement its part
    shape or the shapes per task where they vary (_column_shapes), combined with the Red+
    patterns per distinct combination. Where the tasks' tuples are those of the launch's
    RequirementsTable with columns, in its order, the shapes are those of the first run
    of a table with the same columns (`known`, by their ids and the number of points): the
    table promises equal rects point by point there (taskrt/launch.py), and every region
    and privilege of a position the same in all points. (Megatron GPT@1,024: 463 launches'
    474k tasks, 17 distinct columns.)"""
    reqs = reqs_of[0]
    n = len(reqs)
    table = _table_of(launch, reqs_of) if known is not None else None
    if table is None:
        got = _column_shapes(reqs_of)
    else:
        key = (len(reqs_of), tuple(map(id, chain.from_iterable(table.columns))))
        got = known.get(key)
        if got is None:
            got = _column_shapes(reqs_of)
            if got is not None:
                known[key] = got + (table,)       # (the table kept: its ids stay its own)
    if got is None:
        return _keys_by_task(run)
    shapes, varying = got[0], got[1]
    signature = [(req.region.name, req.privilege.code, shape)
                 for req, shape in zip(reqs, shapes)]
    targets_of = list(map(_TARGETS, run))
    patterns = _patterns(targets_of, n) if known is None else \
        _patterns_known(targets_of, n, known)
    pattern = None if patterns is None else patterns[0]
    one = patterns is None or patterns.count(pattern) == len(patterns)
    if not varying and one:
        return [(launch, tuple(signature), pattern)], [0], None
    # (one pattern for all: not part of the per-task combinations hashed below)
    columns = varying + [repeat(None) if one else patterns]
    first_at: dict = {}             # per distinct combination: its first task's position
    firsts = list(map(first_at.setdefault, zip(*columns), range(len(run))))
    keys = []
    for combo in first_at:
        shape_of_next = iter(combo[:-1]).__next__      # the varying shapes, in order
        sig = tuple([s if s[2] is not None else (s[0], s[1], shape_of_next())
                     for s in signature])
        keys.append((launch, sig, pattern if one else combo[-1]))
    at = list(first_at.values())
    return keys, at, list(map(dict(zip(at, range(len(at)))).__getitem__, firsts))


def _column_shapes(reqs_of: list) -> tuple | None:
    """(per requirement its part shape, None where it varies; per requirement whose shape
    varies, the shapes per task) of tasks asking `reqs_of`, as many each; None when a
    position's region or privilege is not the same in all tasks. Column by column by C
    loops: a requirement whose part shape is the same in every task adds nothing per
    task. Where the tasks share a few requirements tuples (an update launch of sharded
    weights: one tuple per shard), the distinct tuples answer for all unless a shape
    varies: every check is over the set of tuple objects."""
    if len(reqs_of) > 16:
        distinct = list(dict(zip(map(id, reqs_of), reqs_of)).values())  # (reqs_of[0] 1st)
        if 4 * len(distinct) <= len(reqs_of):
            got = _column_shapes(distinct)
            if got is None or not got[1]:
                return got
    reqs = reqs_of[0]
    shapes_of: list = []
    varying: list[list] = []
    shared = all(map(is_, reqs_of, repeat(reqs)))    # one requirements tuple for all
    for k, req in enumerate(reqs):
        if shared:
            shapes_of.append(req.rect.shape)
            continue
        column = list(map(itemgetter(k), reqs_of))
        if all(map(is_, column, repeat(req))):       # one requirement for all
            shapes_of.append(req.rect.shape)
            continue
        if not (all(map(is_, map(_REGION, column), repeat(req.region))) and
                all(map(is_, map(_PRIVILEGE, column), repeat(req.privilege)))):
            return None
        shape = req.rect.shape
        shapes = list(map(_SHAPE_IF_ASKED, column))         # (None where not asked yet)
        if shapes.count(shape) != len(shapes):
            rects = list(map(_RECT, column))
            if not all(map(is_, rects, repeat(req.rect))):
                if None in shapes:
                    shapes = list(map(_SHAPE, rects))
                if shapes.count(shape) != len(shapes):
                    varying.append(shapes)
                    shape = None
        shapes_of.append(shape)
    return shapes_of, varying


def _table_of(launch, reqs_of: list):
    """The launch's RequirementsTable with columns when `reqs_of` are its tuples, all of
    them in its order; else None."""
    table = getattr(launch.projection, "__self__", None)
    if type(table) is not RequirementsTable or table.columns is None or \
            len(table) != len(reqs_of) or not all(map(is_, reqs_of, table.values())):
        return None
    return table


def _patterns(targets_of: list, n: int) -> list | None:
    """Per task (whose targets are `targets_of`, one per requirement, n each), _pattern of
    its targets, column by column; None when no task has a Red+. (Tasks without a Red+
    mostly share one targets tuple, (None,) * n: one object, one pattern, no pass per task
    but an identity check.)"""
    targets = targets_of[0]
    if all(map(is_, targets_of, repeat(targets))):
        pattern = _pattern(targets)
        return None if pattern is None else [pattern] * len(targets_of)
    nones = list(map(_count_none, targets_of))
    if nones.count(n) == len(nones):
        return None
    columns: list = []
    one = True                      # every column has one pattern for all tasks
    for k in range(n):
        column = list(map(itemgetter(k), targets_of))
        none = column.count(None)
        if none == len(column):
            columns.append(repeat(None))
            continue
        if none == 0:                   # per task tuple(map(_FLAGS, its targets)), in C
            counts = list(map(len, column))
            m = counts[0]
            if m and counts.count(m) == len(counts):    # m each: all flags in one pass
                flat = list(chain.from_iterable(column))
                partial, accumulate = list(map(_PARTIAL, flat)), list(map(_ACCUMULATE, flat))
                if (partial.count(partial[0]) == len(flat) and
                        accumulate.count(accumulate[0]) == len(flat)):
                    # one pattern for all (GPT's Red+ columns): no tuple per target
                    columns.append(repeat(((partial[0], accumulate[0]),) * m))
                    continue
                columns.append(list(zip(*[zip(partial, accumulate)] * m)))
            else:
                columns.append(map(tuple, map(map, repeat(_FLAGS), column)))
        else:
            columns.append([None if t is None else tuple(map(_FLAGS, t)) for t in column])
        one = False
    if one:     # (every column a repeat; one object for all tasks: compared by identity)
        return [tuple(map(next, columns))] * len(targets_of)
    patterns = list(zip(*columns))
    if n in nones:                  # tasks without a Red+ among them: their pattern is None
        patterns = [None if c == n else p for c, p in zip(nones, patterns)]
    return patterns


def _patterns_known(targets_of: list, n: int, known: dict) -> list | None:
    """_patterns(targets_of, n), remembered in `known` for a list of the very targets
    tuples of one seen before (a class's members share their template's: taskcolumns.py
    _targets_per_point): one identity pass instead of a pass per column."""
    key = ("patterns", len(targets_of), id(targets_of[0]), id(targets_of[-1]))
    hit = known.get(key)
    if hit is not None and all(map(is_, targets_of, hit[0])):
        return hit[1]
    patterns = _patterns(targets_of, n)
    known[key] = (targets_of, patterns)     # (the list kept: its tuples' ids stay theirs)
    return patterns


def _keys_by_task(run: list) -> tuple:
    """_keys_of_run's (keys, at, local), class_key asked of each task."""
    index: dict = {}
    keys, at, local = [], [], []
    for i, node in enumerate(run):
        key = class_key(node)
        k = index.get(key)
        if k is None:
            k = index[key] = len(keys)
            keys.append(key)
            at.append(i)
        local.append(k)
    return keys, at, local


def _class_of(key: tuple, node, classes: dict, first: list) -> int:
    """The number of class `key`, a new one (with `node` its first task) if not seen."""
    c = classes.get(key)
    if c is None:
        c = classes[key] = len(first)
        first.append(node)
    return c


_KIND, _DEVICE, _LAUNCH = attrgetter("kind"), attrgetter("device"), attrgetter("launch")
_REQUIREMENTS, _TARGETS = attrgetter("requirements"), attrgetter("targets")
_RECT, _SHAPE = attrgetter("rect"), attrgetter("shape")
_REGION, _PRIVILEGE = attrgetter("region"), attrgetter("privilege")
# A requirement's rect's shape where asked before (geometry.SHAPE_IF_ASKED), else None.
_SHAPE_IF_ASKED = attrgetter("rect." + SHAPE_IF_ASKED.__reduce__()[1][0])
_count_none = methodcaller("count", None)
