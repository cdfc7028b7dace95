"""The buffer uses of a graph's copies and reduces by columns (taskrt/othercolumns.py), for
BufferUses.of (taskrt/bufferuses.py): buffers_of's keys, numbered as BufferUses numbers
them, with numpy rather than a key tuple and a dict lookup per use (GPT-3 2.7B at 1,024
GPUs under Megatron t=8: 1.53M copies and 143k reduces of 8 inputs, ~4.4M uses).

buffers_of's rules (taskrt/bufferkeys.py): a copy uses its source's instance (a reduction
copy from partial sums: its partial buffer) and its destination's instance, or for a
reduction copy a staging buffer of its own on the destination; a reduce uses its device's
instance and per input the partial buffer, the instance, or the staging buffer of the copy
that staged it. Staging buffers are the extras numbered first, in node order: one per
reduction copy, its first user. Where a reduce's staged input is not such a copy (another
region or device, or no reduction copy before the reduce), `column_uses` gives None and
BufferUses asks buffers_of node by node.
"""
from __future__ import annotations

from itertools import repeat
from operator import attrgetter

import numpy as np

from .bufferkeys import INSTANCE, PARTIAL, STAGING
from .othercolumns import PARTIAL_INPUT, STAGED_INPUT, OtherColumns


def column_uses(cols: OtherColumns, n_regions: int, n_dev: int, base: int):
    """(uses, staging keys, their devices, their bytes) of the copies and reduces of
    `cols`, or None (see the module doc): uses as (buffer numbers, node ids) pairs of
    arrays; a region's buffer numbered (kind * n_regions + region) * n_dev + device (-1
    where the graph lists no region of that name), the k-th staging buffer base + k."""
    i8 = np.int64
    ids = cols.ids
    # Copies.
    copy_ids = ids[cols.copy_at]
    region, src, dst = cols.copy_region, cols.copy_src, cols.copy_dst
    reduction = cols.copy_reduction
    known = region >= 0
    src_kind = np.where(reduction & cols.copy_from_partial, PARTIAL, INSTANCE)
    src_num = np.where(known, (src_kind * n_regions + region) * n_dev + src, -1)
    dst_num = np.where(known, (INSTANCE * n_regions + region) * n_dev + dst, -1)
    staging = np.flatnonzero(reduction)            # the reduction copies, in node order
    dst_num[staging] = base + np.arange(len(staging), dtype=i8)
    uses = [(src_num, copy_ids), (dst_num, copy_ids)]
    # Reduces.
    reduce_ids = ids[cols.reduce_at]
    region, device = cols.reduce_region, cols.reduce_device
    uses.append((np.where(region >= 0, (INSTANCE * n_regions + region) * n_dev + device, -1),
                 reduce_ids))
    counts = np.diff(cols.input_ptr)
    node = np.repeat(reduce_ids, counts)
    region, device = np.repeat(region, counts), np.repeat(device, counts)
    source = cols.input_source
    kind = np.where(source == PARTIAL_INPUT, PARTIAL, INSTANCE)
    number = np.where(region >= 0, (kind * n_regions + region) * n_dev + device, -1)
    staged = np.flatnonzero(source == STAGED_INPUT)
    if len(staged):
        staging_ids = copy_ids[staging]
        if not len(staging_ids):
            return None
        wanted = cols.input_copy[staged]
        k = np.minimum(np.searchsorted(staging_ids, wanted), len(staging_ids) - 1)
        copy = staging[k]                     # (index among the copies)
        # The same key as the copy's: a reduction copy before the reduce, of a region of
        # the same name (by index, or by name where the graph lists neither), to this
        # device.
        if not (np.array_equal(staging_ids[k], wanted) and (wanted < node[staged]).all()
                and np.array_equal(cols.copy_region[copy], region[staged])
                and np.array_equal(cols.copy_dst[copy], device[staged])):
            return None
        unlisted = np.flatnonzero(region[staged] < 0)
        nodes = cols.nodes
        reduce_at = np.repeat(cols.reduce_at, counts)[staged]
        for j in unlisted.tolist():
            if nodes[cols.copy_at[copy[j]]].region.name != nodes[reduce_at[j]].region.name:
                return None
        number[staged] = base + k
    uses.append((number, node))
    keys = StagingKeys(cols.nodes, cols.copy_at[staging], dst[staging], cols.copy_region[staging])
    return uses, keys, dst[staging], cols.copy_bytes[staging]


class StagingKeys:
    """The staging buffers' keys of column_uses, as buffers_of gives them ((STAGING, region
    name, destination, the copy)), made when asked (GPT-3 2.7B at 1,024 GPUs under Megatron
    t=8 has 1.13M: their tuples, made all at once, were ~0.15 s, and the memory model needs
    only the kept regions' and, in an executor, the temporaries' keys). `nodes`: the
    OtherColumns' nodes, `at` the reduction copies' positions among them, `dst` their
    destinations, `region` their regions' indices (-1 where the graph lists no region of
    the name)."""
    __slots__ = ("nodes", "at", "dst", "region")

    def __init__(self, nodes: list, at: np.ndarray, dst: np.ndarray, region: np.ndarray):
        self.nodes, self.at, self.dst, self.region = nodes, at, dst, region

    def __len__(self) -> int:
        return len(self.at)

    def __getitem__(self, k: int) -> tuple:
        copy = self.nodes[int(self.at[k])]
        return (STAGING, copy.region.name, int(self.dst[k]), copy)

    def __iter__(self):
        copies = [self.nodes[i] for i in self.at.tolist()]
        return zip(repeat(STAGING), map(_REGION_NAME, copies), self.dst.tolist(), copies)

    def kept(self, region_kept: np.ndarray, kept) -> np.ndarray:
        """Per key, whether its region name is in `kept` (region_kept: per region index of
        the graph, whether its name is)."""
        out = region_kept[self.region] if len(region_kept) else \
            np.zeros(len(self.region), dtype=bool)
        for k in np.flatnonzero(self.region < 0).tolist():     # names the graph does not list
            out[k] = self[k][1] in kept
        return out


_REGION_NAME = attrgetter("region.name")
