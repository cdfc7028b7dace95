"""The buffers a SimulationSession knows, and taskrt.liveness's memory model over them as
arrays, kept up to date by the regions each change re-planned (strategy/delta.py).

A buffer (a taskrt.liveness key) gets a dense id with its device, region and own bytes
(staging and saved state; 0 for a region's instance and partial-sum buffers, whose size is
the planner's current rect). Per region the table holds its current instance/partial
buffers; what a change does not touch is not looked at again: the current byte sizes are
one array updated where a region's buffers changed, and the persistent bytes of the
regions' buffers per device are sums updated by the same deltas (recomputed over all
regions that enter or leave the kept set when it changes). What is left per proposal is
one compiled pass over the graph's buffer uses (which temporaries, their first and last
users' times) and the sort of their allocation events (strategy/memsweep.py: the model of
taskrt.liveness.peak_bytes_of_users, which the tests compare it with).
"""
from __future__ import annotations

import numpy as np

from taskrt.liveness import STAGING, STATE
from taskrt.settings import Settings

from .memsweep import Scratch, sweep_peak

# A template's buffer ids made for all its entries at once (BufferTable.ids_on_rows). Off:
# ids_on per entry (the oracle).
ROW_BATCH = True


class _Column:
    """A list of numbers that also hands them out as a numpy array, converting only what
    was appended since the last call, into an array of spare room that doubles when full
    (each call concatenating the whole array again copied every id's entry per proposal:
    NMT @16's table holds ~300k ids, six such columns)."""
    __slots__ = ("items", "_room", "_done")

    def __init__(self, dtype):
        self.items: list = []
        self._room = np.zeros(0, dtype=dtype)
        self._done = 0

    def array(self) -> np.ndarray:
        """The items as an array (a view, valid until the next call)."""
        self._room, self._done = _appended(self._room, self._done, self.items)
        return self._room[:self._done]


def _appended(room: np.ndarray, done: int, items) -> tuple:
    """(room, len(items)): `room` (its first `done` entries those of `items`) with the
    rest of `items` written after them, made anew at twice the size when they do not
    fit."""
    n = len(items)
    if n > done:
        if n > len(room):
            grown = np.empty(max(n, 2 * len(room)), dtype=room.dtype)
            grown[:done] = room[:done]
            room = grown
        room[done:n] = items[done:n]
    return room, n


class BufferTable:
    """Buffers as dense ids, each region's current buffers, and the memory peak over them."""

    def __init__(self, num_devices: int):
        self.ids: dict = {}                       # buffer key -> id
        self.dev, self.region = _Column(np.int64), _Column(np.int64)
        self.own_bytes = _Column(np.int64)
        self.staging, self.state = _Column(bool), _Column(bool)
        self.region_index: dict[str, int] = {}
        # Per region: its current instance and partial-sum buffers as (ids, devices, bytes).
        self.regions: dict[str, tuple] = {}
        self.initial_names: set[str] = set()      # regions with initial data
        self.initial_changes = 0                  # how many times initial_names changed
        self._bytes = np.zeros(0, dtype=np.int64)    # per id: own or current region bytes
        self._num_bytes = 0                          # (in its first entries: _sizes)
        self.num_devices = num_devices
        # Per (kind, region name): the ids of its buffers (kind, name, d, None) by device d,
        # -1 where none yet (ids_on), made on first use and kept current by id().
        self._on: dict[tuple, np.ndarray] = {}
        # For the kept set `_kept`: per device, bytes and count of the regions' persistent
        # buffers, and per region index whether it is kept.
        self._kept: set[str] | None = None
        self._kept_mask = np.zeros(0, dtype=bool)
        self._persistent_bytes = np.zeros(num_devices, dtype=np.int64)
        self._persistent_count = np.zeros(num_devices, dtype=np.int64)
        # The small-buffer threshold, resolved once per table: reading it from the
        # environment on every region update was 14% of a LeNet proposal's CPU time.
        self._settings = Settings.resolve()
        self._min_bytes = self._settings.min_temporary_bytes
        self._scratch = Scratch()                 # the sweeps' working entries per id

    def __len__(self) -> int:
        return len(self.ids)

    def id(self, key, nbytes: int) -> int:
        """The id of buffer `key` (taskrt.liveness), its own bytes `nbytes`."""
        b = self.ids.get(key)
        if b is None:
            b = self.ids[key] = len(self.dev.items)
            self.dev.items.append(key[2])
            name = key[1]
            r = self.region_index.get(name)
            if r is None:
                r = self.region_index[name] = len(self.region_index)
            self.region.items.append(r)
            self.own_bytes.items.append(nbytes)
            self.staging.items.append(key[0] == STAGING)
            self.state.items.append(key[0] == STATE)
            if key[3] is None:
                on = self._on.get(key[:2])
                if on is not None:
                    on[key[2]] = b
        return b

    def add_staging(self, keys: list, nbytes: list) -> int:
        """Number these staging buffers (keys (STAGING, region name, device, copy node), none
        known yet; own bytes nbytes[k]) in order, as id() of each in turn would, in one
        batch; the first one's id."""
        b0, m = len(self.dev.items), len(keys)
        self.ids.update(zip(keys, range(b0, b0 + m)))
        index = self.region_index
        regions = []
        for key in keys:
            r = index.get(key[1])
            if r is None:
                r = index[key[1]] = len(index)
            regions.append(r)
        self.dev.items.extend([key[2] for key in keys])
        self.region.items.extend(regions)
        self.own_bytes.items.extend(nbytes)
        self.staging.items.extend([True] * m)
        self.state.items.extend([False] * m)
        return b0

    def ids_on(self, kind: str, name: str, devices: np.ndarray) -> np.ndarray:
        """The ids of the buffers (kind, name, d, None) for the devices d in `devices` (an
        int64 array), made where new: a region's instance or partial sums (kind INSTANCE
        or PARTIAL, own bytes 0), numbered in device order."""
        on = self._on.get((kind, name))
        if on is None:
            get = self.ids.get
            on = self._on[(kind, name)] = np.array(
                [get((kind, name, d, None), -1) for d in range(self.num_devices)],
                dtype=np.int64)
        got = on[devices]
        if len(got) and got.min() < 0:
            self._number_on(kind, name, np.unique(devices[got < 0]).tolist())
            got = on[devices]
        return got

    def _number_on(self, kind: str, name: str, new: list) -> None:
        """Number the buffers (kind, name, d, None) for the devices d in `new` (none known
        yet), in that order (ids_on's)."""
        b0, m = len(self.dev.items), len(new)
        self.ids.update(zip([(kind, name, d, None) for d in new], range(b0, b0 + m)))
        r = self.region_index.get(name)
        if r is None:
            r = self.region_index[name] = len(self.region_index)
        self.dev.items.extend(new)
        self.region.items.extend([r] * m)
        self.own_bytes.items.extend([0] * m)
        self.staging.items.extend([False] * m)
        self.state.items.extend([False] * m)
        on = self._on.get((kind, name))
        if on is not None:
            on[new] = np.arange(b0, b0 + m, dtype=np.int64)

    def ids_on_rows(self, pattern: tuple, devices: np.ndarray) -> np.ndarray:
        """(entries of `pattern`, devices): ids_on(kind, name, devices) of each (kind, name)
        of `pattern` in turn, numbered as those calls would number the new ones (entry by
        entry, each entry's devices ascending), by dict lookups on the devices met, not a
        few numpy calls per entry (a task template's buffers: a session build asks ~6 per
        launch, mostly of 16 or fewer devices). ROW_BATCH False: those calls (the oracle
        of tests/strategy/test_group_classes.py)."""
        if not ROW_BATCH or len(set(pattern)) != len(pattern):
            return np.array([self.ids_on(kind, name, devices) for kind, name in pattern],
                            dtype=np.int64).reshape(len(pattern), len(devices))
        listed = devices.tolist()
        met = sorted(set(listed))
        ids, rows = self.ids, []
        for kind, name in pattern:
            row = [ids.get((kind, name, d, None), -1) for d in met]
            if -1 in row:
                self._number_on(kind, name, [d for d, b in zip(met, row) if b < 0])
                row = [ids[(kind, name, d, None)] for d in met]
            rows.append(row)
        table = np.array(rows, dtype=np.int64).reshape(len(pattern), len(met))
        if met == listed:
            return table
        return table[:, np.searchsorted(np.array(met, dtype=np.int64), devices)]

    def _sizes(self) -> np.ndarray:
        """Per id: its own bytes, or a current region buffer's bytes (0 for one no longer
        current), grown by the ids added since the last call."""
        own = self.own_bytes.array()
        self._bytes, self._num_bytes = _appended(self._bytes, self._num_bytes, own)
        return self._bytes[:self._num_bytes]

    # -- regions --------------------------------------------------------------------------
    def set_region(self, name: str, buffers: tuple | None, initial: bool,
                   persistent: bool = True) -> None:
        """Region `name` now has these (ids, devices, bytes) buffers (None: none, the
        region is gone) and has initial data or not. `persistent` False: leave the
        persistent sums as they are (put_back_persistent will set them)."""
        sizes = self._sizes()
        old = self.regions.get(name)
        if old is not None:
            sizes[old[0]] = 0
            if persistent:
                self._add_persistent(name, old, -1)
        if buffers is None:
            self.regions.pop(name, None)
        else:
            self.regions[name] = buffers
            sizes[buffers[0]] = buffers[2]
            if persistent:
                self._add_persistent(name, buffers, 1)
        if initial != (name in self.initial_names):
            self.initial_changes += 1
            if initial:
                self.initial_names.add(name)
            else:
                self.initial_names.discard(name)

    def persistent_mark(self) -> tuple:
        """The persistent sums and the kept set they are for, for put_back_persistent."""
        return (self._kept, self._kept_mask, self._persistent_bytes.copy(),
                self._persistent_count.copy())

    def put_back_persistent(self, mark: tuple) -> None:
        """The sums of a persistent_mark() again, once every region set since has its
        buffers of then back (set_region with persistent False): the sums are a function of
        the regions' buffers and the kept set, which comes back with them."""
        self._kept, self._kept_mask, pb, pc = mark
        self._persistent_bytes[:] = pb
        self._persistent_count[:] = pc

    def _add_persistent(self, name: str, buffers: tuple, sign: int) -> None:
        if self._kept is None:
            return
        ids, devs, sizes = buffers
        if name not in self._kept:
            keep = sizes < self._min_bytes              # liveness.is_small
            devs, sizes = devs[keep], sizes[keep]
        np.add.at(self._persistent_bytes, devs, sizes if sign > 0 else -sizes)
        np.add.at(self._persistent_count, devs, sign)

    def _set_kept(self, kept: set[str]) -> None:
        """Make the region sums and mask those of `kept` (all regions summed again only when
        it differs from the last kept set)."""
        index = self.region_index
        if kept == self._kept and len(self._kept_mask) == len(index):
            return
        if kept != self._kept:
            # Only the regions that came into or left the kept set count differently.
            changed = self._kept ^ kept if self._kept is not None else None
            if changed is None or len(changed) > len(self.regions):
                self._kept = set(kept)
                self._persistent_bytes[:] = 0
                self._persistent_count[:] = 0
                for name, buffers in self.regions.items():
                    self._add_persistent(name, buffers, 1)
            else:
                for name in changed:
                    if name in self.regions:
                        self._add_persistent(name, self.regions[name], -1)
                self._kept = set(kept)
                for name in changed:
                    if name in self.regions:
                        self._add_persistent(name, self.regions[name], 1)
        mask = np.zeros(len(index), dtype=bool)
        mask[[index[name] for name in kept if name in index]] = True
        self._kept_mask = mask

    # -- the peak ---------------------------------------------------------------------------
    def peak(self, kept: set[str], users_buf, users_node, start, end,
             user_counts=None) -> dict[int, int]:
        """Peak bytes per device (taskrt.liveness's model) when node users_node[i] uses
        buffer users_buf[i] and node j runs from start[j] to end[j], the regions in `kept`
        persisting. `user_counts` instead of users_node (None): node i has that many of
        the uses, in node order."""
        self._set_kept(kept)
        return sweep_peak(users_buf, users_node, start, end, self._sizes(), self.dev.array(),
                          self.region.array(), self._kept_mask, self.staging.array(),
                          self.state.array(), self._settings.min_temporary_bytes,
                          self._persistent_bytes.copy(), self._persistent_count.copy(),
                          self._scratch, user_counts)
