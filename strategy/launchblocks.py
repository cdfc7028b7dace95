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

import numpy as np

from taskrt.nodegroups import join

from .taskgroups import HOST_ARRAYS

SIM_ARRAYS = ("dur", "res_counts", "res_ids", "buf_counts", "buf_ids")   # GroupSim's
RUN_ARRAYS = ("gids", "offsets", "pred_count", "pred_gid", "pred_idx")   # nodegroups.GroupRun's
# Per node (the others: per group, gids and offsets; or flattened, counted per node by ...)
_PER_NODE = ("dur", "res_counts", "buf_counts", "pred_count", "pre_dur", "pre_counts",
             "post_dur", "post_counts")
_COUNTED_BY = {"res_ids": "res_counts", "buf_ids": "buf_counts", "pred_gid": "pred_count",
               "pred_idx": "pred_count", "pre_ids": "pre_counts", "post_ids": "post_counts"}
_I8 = np.int64
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


def _pieces(block: LaunchBlock, field: str) -> list:
    """The arrays that make up `field` of the block's nodes, in its groups' order."""
    if field in SIM_ARRAYS:
        return [getattr(s, field) for s in block.sims]
    if field in HOST_ARRAYS:
        k = HOST_ARRAYS.index(field)
        return [s.host[k] for s in block.sims]
    groups = block.groups
    if field == "gids":
        return [np.fromiter([g.gid for g in groups], dtype=_I8, count=len(groups))]
    if field == "offsets":
        sizes = [len(g.nodes) for g in groups]
        offsets = np.zeros(len(groups), dtype=_I8)
        if len(groups) > 1:
            np.cumsum(sizes[:-1], out=offsets[1:])
        return [offsets]
    return [getattr(g, field) for g in groups]          # pred_count, pred_gid, pred_idx


class Joined:
    """Every launch block's arrays joined in program order, per field (SIM_ARRAYS,
    RUN_ARRAYS and, with host costs, HOST_ARRAYS), and per field each block's length in it;
    kept up to date by splicing in the blocks that changed."""
    __slots__ = ("arrays", "lens")

    def __init__(self, blocks: list, fields: tuple):
        groups = [g for b in blocks for g in b.groups]
        nb, ng = len(blocks), len(groups)
        per_block = np.fromiter([len(b.groups) for b in blocks], dtype=_I8, count=nb)
        group_at = np.zeros(nb + 1, dtype=_I8)             # each block's first group
        np.cumsum(per_block, out=group_at[1:])
        node_at = np.zeros(ng + 1, dtype=_I8)              # each group's first node
        np.cumsum(np.fromiter([len(g.nodes) for g in groups], dtype=_I8, count=ng),
                  out=node_at[1:])
        block_nodes = node_at[group_at]                   # each block's first node, and the end
        sims = [s for b in blocks for s in b.sims]
        arrays = {}
        for f in fields:
            if f in SIM_ARRAYS:
                parts = [getattr(s, f) for s in sims]
            elif f in HOST_ARRAYS:
                k = HOST_ARRAYS.index(f)
                parts = [s.host[k] for s in sims]
            elif f == "gids":
                parts = [np.fromiter([g.gid for g in groups], dtype=_I8, count=ng)]
            elif f == "offsets":
                parts = [node_at[:-1] - np.repeat(block_nodes[:-1], per_block)]
            else:
                parts = [getattr(g, f) for g in groups]
            arrays[f] = join(parts) if parts else np.zeros(0, dtype=_DTYPES.get(f, _I8))
        lens = {}
        nodes = np.diff(block_nodes)
        for f in fields:
            if f in ("gids", "offsets"):
                lens[f] = per_block
            elif f in _PER_NODE:
                lens[f] = nodes
            else:                     # flattened: summed over each block's nodes' counts
                counted = np.zeros(node_at[-1] + 1, dtype=_I8)
                np.cumsum(arrays[_COUNTED_BY[f]], out=counted[1:])
                lens[f] = counted[block_nodes[1:]] - counted[block_nodes[:-1]]
        self.arrays, self.lens = arrays, lens

    def spliced(self, blocks: list, changed: list[int]) -> "Joined":
        """The arrays with those of blocks[i] put in for each i in `changed` (ascending), as
        a new Joined (this one stays as it is: an undo may take it back)."""
        out = Joined.__new__(Joined)
        out.arrays, out.lens = {}, {}
        for f, arr in self.arrays.items():
            lens = self.lens[f].copy()
            starts = np.zeros(len(lens) + 1, dtype=_I8)
            np.cumsum(lens, out=starts[1:])
            pieces, prev = [], 0
            for i in changed:
                new = _pieces(blocks[i], f)
                pieces.append(arr[starts[prev]:starts[i]])
                pieces += new
                lens[i] = sum(map(len, new))
                prev = i + 1
            pieces.append(arr[starts[prev]:])
            out.arrays[f] = np.concatenate(pieces)
            out.lens[f] = lens
        return out
