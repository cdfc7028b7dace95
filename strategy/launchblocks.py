"""Launch blocks and their arrays joined in program order: what SimulationSession
(strategy/delta.py) hands the list scheduler and the memory sweep.

A block is one launch's node groups (taskrt.Planner.launch_groups) and their GroupSims
(strategy/taskgroups.py), the unit the session keeps while the launch's version is
unchanged. A block holds no arrays of its own: `Joined` concatenates the groups' arrays
straight into the whole graph's (one np.concatenate per field, whatever the number of
blocks), and a proposal that changes a few launches of thousands splices only those
launches' groups' arrays into the joined arrays of before (`Joined.spliced`). Joining per
block first and then over blocks (as before) was most of a small graph's simulation: a
2-step RNNLM proposal rebuilt ~14 of its 27 launches' blocks, ~10 small numpy calls each.
"""
from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter, itemgetter

import numpy as np

from taskrt.nodegroups import join

from .taskgroups import HOST_ARRAYS

SIM_ARRAYS = ("dur", "res_counts", "res_ids", "buf_counts", "buf_ids")   # GroupSim's
# Joined on first use only: the memory peak's (a search rejects most proposals on their
# time alone, before their peak: strategy/search.py "Memory last").
MEMORY_ARRAYS = ("buf_counts", "buf_ids")
RUN_ARRAYS = ("gids", "offsets", "pred_count", "pred_gid", "pred_idx")   # nodegroups.GroupRun's
# Per node (the others: per group, gids and offsets; or flattened, counted per node by ...)
_PER_NODE = ("dur", "res_counts", "buf_counts", "pred_count", "pre_dur", "pre_counts",
             "post_dur", "post_counts")
_COUNTED_BY = {"res_ids": "res_counts", "buf_ids": "buf_counts", "pred_gid": "pred_count",
               "pred_idx": "pred_count", "pre_ids": "pre_counts", "post_ids": "post_counts"}
_I8 = np.int64
_GROUPS, _NODES, _GID, _HOST = (attrgetter("groups"), attrgetter("nodes"), attrgetter("gid"),
                                attrgetter("host"))
_DTYPES = {"dur": np.float64, "pre_dur": np.float64, "post_dur": np.float64}


@dataclass(eq=False, slots=True)
class LaunchBlock:
    """One launch's groups and their GroupSims; `writers`: those of its GroupSims whose
    tasks write something (what SimulationSession._count_block counts)."""
    version: int
    groups: list
    sims: list
    writers: tuple

    @classmethod
    def of(cls, version: int, groups: list, sims: list) -> "LaunchBlock":
        return cls(version, groups, sims,
                   tuple([s for s in sims if s.read_by_writers or s.reads_of_writers]))


def _pieces(blocks: list, changed: list[int], field: str) -> list[list]:
    """Per block blocks[i], i in `changed`: the arrays that make up `field` of its nodes, in
    its groups' order. A group's gid and offset in its block are made for all those blocks
    at once (a numpy call or two, not per block)."""
    if field in SIM_ARRAYS:
        get = attrgetter(field)
        return [list(map(get, blocks[i].sims)) for i in changed]
    if field in HOST_ARRAYS:
        get = itemgetter(HOST_ARRAYS.index(field))
        return [[get(s.host) for s in blocks[i].sims] for i in changed]
    if field not in ("gids", "offsets"):                 # pred_count, pred_gid, pred_idx
        get = attrgetter(field)
        return [list(map(get, blocks[i].groups)) for i in changed]
    groups = [g for i in changed for g in blocks[i].groups]
    if field == "gids":
        flat = np.fromiter(map(_GID, groups), dtype=_I8, count=len(groups))
    else:       # each group's first node counted from all those blocks' first
        flat = np.zeros(len(groups), dtype=_I8)
        if len(groups) > 1:
            np.cumsum(np.fromiter(map(len, map(_NODES, groups[:-1])), dtype=_I8,
                                  count=len(groups) - 1), out=flat[1:])
    out, at = [], 0
    for i in changed:
        n = len(blocks[i].groups)
        part = flat[at:at + n]
        out.append([part if field == "gids" or not n else part - part[0]])
        at += n
    return out


def _kind(field: str) -> str:
    """What a field's lengths per block count: a block's groups, its nodes, or the entries
    of a flattened field (named by the per-node field that counts them)."""
    if field in ("gids", "offsets"):
        return "groups"
    return _COUNTED_BY.get(field, "nodes")


class _Arrays(dict):
    """Joined.arrays: field -> its joined array; a MEMORY_ARRAYS field is made when first
    asked for: spliced from the Joined this one was spliced from (`base`, with the
    `changed` blocks), when that one has it, else joined from the blocks (a copy of the
    list the Joined was made or spliced with)."""
    __slots__ = ("blocks", "base", "changed", "lens")

    def __missing__(self, field: str) -> np.ndarray:
        if field not in MEMORY_ARRAYS:
            raise KeyError(field)
        base = self.base
        if base is not None and field in base.arrays:
            got, self.lens[field] = _splice(base, [field], self.blocks, self.changed)[field]
        else:
            parts = [getattr(s, field) for b in self.blocks for s in b.sims]
            got = join(parts) if parts else np.zeros(0, dtype=_I8)
        self[field] = got
        if all(f in self for f in MEMORY_ARRAYS):
            self.base = self.changed = None      # (no chain of Joined objects kept alive)
        return got


def _splice(joined: "Joined", fields: list[str], blocks: list, changed: list[int]) -> dict:
    """{field: (array, each block's length in it)}: joined's `fields` (of one _kind) with
    the arrays of blocks[i] put in for each i in `changed` (ascending). Where each changed
    block sits is worked out once for all the fields (they have the same lengths), with
    Python ints for the slices, and the lengths are one array shared by those fields."""
    lens = joined.lens_of(fields[0])
    at = np.array(changed, dtype=_I8)
    stops = np.cumsum(lens)[at]
    begins, stops = (stops - lens[at]).tolist(), stops.tolist()
    out, new_lens = {}, None
    for field in fields:
        arr, new = joined.arrays[field], _pieces(blocks, changed, field)
        if new_lens is None:
            new_lens = lens.copy()
            new_lens[at] = [sum(map(len, p)) for p in new]
        pieces, prev = [], 0
        for b, e, p in zip(begins, stops, new):
            pieces.append(arr[prev:b])
            pieces += p
            prev = e
        pieces.append(arr[prev:])
        out[field] = (np.concatenate(pieces), new_lens)
    return out


class Joined:
    """Every launch block's arrays joined in program order, per field (SIM_ARRAYS,
    RUN_ARRAYS and, with host costs, HOST_ARRAYS; MEMORY_ARRAYS on first use), and per
    field each block's length in it (`lens`; a flattened field's, made on first use from
    `bounds`, each block's first node and the end); kept up to date by splicing in the
    blocks that changed."""
    __slots__ = ("arrays", "lens", "bounds")

    def __init__(self, blocks: list, fields: tuple):
        groups = [g for b in blocks for g in b.groups]
        nb, ng = len(blocks), len(groups)
        per_block = np.fromiter(map(len, map(_GROUPS, blocks)), dtype=_I8, count=nb)
        group_at = np.zeros(nb + 1, dtype=_I8)             # each block's first group
        np.cumsum(per_block, out=group_at[1:])
        node_at = np.zeros(ng + 1, dtype=_I8)              # each group's first node
        np.cumsum(np.fromiter(map(len, map(_NODES, groups)), dtype=_I8, count=ng),
                  out=node_at[1:])
        bounds = node_at[group_at]                         # each block's first node, the end
        sims = [s for b in blocks for s in b.sims]
        arrays = _Arrays()
        arrays.blocks, arrays.base, arrays.changed = list(blocks), None, None
        for f in fields:
            if f in MEMORY_ARRAYS:
                continue
            if f in SIM_ARRAYS:
                parts = list(map(attrgetter(f), sims))
            elif f in HOST_ARRAYS:
                parts = list(map(itemgetter(HOST_ARRAYS.index(f)), map(_HOST, sims)))
            elif f == "gids":
                parts = [np.fromiter(map(_GID, groups), dtype=_I8, count=ng)]
            elif f == "offsets":
                parts = [node_at[:-1] - np.repeat(bounds[:-1], per_block)]
            else:
                parts = list(map(attrgetter(f), groups))
            arrays[f] = join(parts) if parts else np.zeros(0, dtype=_DTYPES.get(f, _I8))
        nodes = np.diff(bounds)
        self.lens = {f: per_block if f in ("gids", "offsets") else nodes
                     for f in fields if f not in _COUNTED_BY}
        arrays.lens = self.lens
        self.arrays, self.bounds = arrays, bounds

    def lens_of(self, field: str) -> np.ndarray:
        """Each block's length in `field`."""
        got = self.lens.get(field)
        if got is None and field not in _COUNTED_BY:      # per node: as every such field
            return self.lens["dur"]
        if got is None:           # flattened: summed over each block's nodes' counts
            bounds = self.bounds
            if bounds is None:    # (spliced)
                bounds = self.bounds = np.zeros(len(self.lens["dur"]) + 1, dtype=_I8)
                np.cumsum(self.lens["dur"], out=bounds[1:])
            counted = np.zeros(bounds[-1] + 1, dtype=_I8)
            np.cumsum(self.arrays[_COUNTED_BY[field]], out=counted[1:])
            got = self.lens[field] = counted[bounds[1:]] - counted[bounds[:-1]]
        return got

    def spliced(self, blocks: list, changed: list[int]) -> "Joined":
        """The arrays with those of blocks[i] put in for each i in `changed` (ascending), as
        a new Joined (this one stays as it is: an undo may take it back). The memory
        arrays are spliced when first asked for (most changes of a search are timed and
        undone without their peak: strategy/search.py "Memory last")."""
        out = Joined.__new__(Joined)
        out.arrays, out.lens, out.bounds = _Arrays(), {}, None
        arrays = out.arrays
        arrays.blocks, arrays.changed, arrays.lens = list(blocks), changed, out.lens
        # (from this one while it has them; else joined from the blocks when asked for)
        arrays.base = self if any(f in self.arrays for f in MEMORY_ARRAYS) else None
        kinds: dict = {}
        for f in self.arrays:
            if f not in MEMORY_ARRAYS:
                kinds.setdefault(_kind(f), []).append(f)
        for fields in kinds.values():
            for f, (arr, lens) in _splice(self, fields, blocks, changed).items():
                arrays[f], out.lens[f] = arr, lens
        return out
