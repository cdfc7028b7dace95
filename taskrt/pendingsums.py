"""PendingSums: the partial sums of one region not reduced yet, as coherence.py keeps them
(each a rect and (device, in partial buffer?)), found by rect over all devices (a read's
reduction) or over one device (its Red+ accumulating onto its own sums). LaunchSums: those
one launch's reductions meet, taken out of the index while they are reduced."""
from __future__ import annotations

from .geometry import Rect
from .rectindex import RectIndex, scan_items
from .summedpieces import APART_BUT_EQUAL, sums_apart, sums_apart_but_equal


class PendingSums:
    """The pending partial sums of a region: a RectIndex of (rect, (device, in partial
    buffer?)) items, plus per device its own items, so that a device's Red+ finds its sums
    without walking every device's (data parallelism on n devices leaves n full-rect sums:
    one index alone made each Red+ O(n), a launch O(n^2)). A device's own items are a dict
    {id: (rect, value)} (the item of the RectIndex, in its insertion order), scanned by
    of_device, while it has at most _OWN_SCAN of them, and a RectIndex of its own past that:
    a reduction retires a piece of every contributing device's sums (NMT: 16 per reduce,
    ~30k per proposal), and a second index to update per retirement cost as much as the
    first, while a device's Red+ (which asks for its sums) is rarer than the retirements."""
    __slots__ = ("_all", "_by_device", "_link")

    def __init__(self):
        self._all = RectIndex(exact=False)        # id -> (rect, (device, partial))
        # device -> {id in _all: its (rect, value)}, or past _OWN_SCAN items a RectIndex of
        # (rect, id in _all), with _link: id in _all -> id in its device's RectIndex.
        self._by_device: dict[int, dict | RectIndex] = {}
        self._link: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._all)

    def __iter__(self):
        return iter(self._all)

    def add(self, rect: Rect, value: tuple[int, bool]) -> int:
        items = self._all
        i = items.add(rect, value)
        own = self._by_device.get(value[0])
        if own is None:
            self._by_device[value[0]] = {i: items.get(i)}
        elif type(own) is dict:
            own[i] = items.get(i)
            if len(own) > _OWN_SCAN:
                self._promote(value[0], own)
        else:
            self._link[i] = own.add(rect, i)
        return i

    def _promote(self, device: int, own: dict) -> None:
        """`device`'s items from a dict into a RectIndex of their own."""
        index, link = RectIndex(exact=False), self._link
        for i, (rect, _) in own.items():
            link[i] = index.add(rect, i)
        self._by_device[device] = index

    def remove(self, i: int) -> None:
        items = self._all
        device = items.get(i)[1][0]
        items.remove(i)
        own = self._by_device[device]
        if type(own) is dict:
            del own[i]
        else:
            own.remove(self._link.pop(i))

    def replace(self, i: int, rect: Rect) -> int:
        """remove(i), then add of `rect` with i's value, in one step; returns the new id."""
        items = self._all
        value = items.get(i)[1]
        j = items.replace(i, rect, value)
        own = self._by_device[value[0]]
        if type(own) is dict:
            del own[i]
            own[j] = items.get(j)
        else:
            self._link[j] = own.replace(self._link.pop(i), rect, j)
        return j

    def retire(self, rect: Rect, found) -> None:
        """The items `found` [(id, rect, value)] lose their part of `rect` (what
        RegionState.retire_pending does: replace, or remove and add the pieces left)."""
        items, by_device = self._all, self._by_device
        get = items.get
        last = pieces = None
        for i, r, value in found:
            # (sums of one rect, one per device, come in a run: one subtract, their pieces
            # shared, so the next reduction's run is of one object)
            if r is not last:
                last, pieces = r, r.subtract(rect)
            if len(pieces) != 1:
                self.remove(i)
                for piece in pieces:
                    self.add(piece, value)
                continue
            # (a sum of a whole part, read part by part: replace() inlined)
            j = items.replace(i, pieces[0], value)
            own = by_device[value[0]]
            if type(own) is dict:
                del own[i]
                own[j] = get(j)
            else:
                self._link[j] = own.replace(self._link.pop(i), pieces[0], j)

    def overlapping(self, rect: Rect) -> list:
        """Every device's items overlapping `rect`, in insertion order."""
        return self._all.overlapping(rect)

    def of_device(self, device: int, rect: Rect) -> list:
        """`device`'s items overlapping `rect`, in insertion order."""
        own = self._by_device.get(device)
        if not own or rect.empty:
            return []
        if type(own) is dict:
            return scan_items(own.items(), rect)
        items = self._all
        return [(i, r, items.get(i)[1]) for _, r, i in own.overlapping(rect)]


class LaunchSums:
    """The pending sums a launch's reductions meet (coherence._reduce_for_reads: those meeting
    the bounding box of its read rects), taken out of `pending` while the reductions run:
    `overlapping` and `retire` answer and act as PendingSums' do, on a dict (a scan of the
    few sums met, no index update per retirement), and `close` puts the result back: a sum
    retired whole is removed, one that left one piece (however often cut) replaced by it,
    other pieces added. Equal to retiring sum by sum in the index: a retired sum's pieces go
    to the end of the insertion order either way, so both end with the sums not retired in
    their order, then the pieces left, in the order they were made. Past _LAUNCH_SCAN sums
    met it hands every call to `pending` (a scan of many would cost more than the index's
    queries), unless the launch's first rect meets many of them (_scan_pays). `apart`:
    summedpieces.sums_apart of the sums met (True), else APART_BUT_EQUAL where
    summedpieces.sums_apart_but_equal holds, else False."""
    __slots__ = ("_pending", "_items", "_gone", "_heir", "_next", "apart")

    def __init__(self, pending: PendingSums, rects):
        box = None
        for rect in rects:
            box = rect if box is None else box.union_bbox(rect)
        found = pending.overlapping(box)
        self._pending = pending
        self.apart = sums_apart(box, found) or \
            sums_apart_but_equal(box, found) and APART_BUT_EQUAL
        # key -> (rect, value), in insertion order: ids of `pending` for the sums found,
        # negative keys for the pieces retirements leave (None: calls go to `pending`)
        self._items = {i: (r, v) for i, r, v in found} if _scan_pays(rects, found) else None
        self._gone: list[int] = []      # ids of `pending` retired whole or into several
        self._heir: dict[int, int] = {}     # a key -> the id of `pending` it is all left of
        self._next = -1

    def overlapping(self, rect: Rect) -> list:
        """The sums overlapping `rect` (inside the box), in insertion order."""
        items = self._items
        if items is None:
            return self._pending.overlapping(rect)
        return scan_items(items.items(), rect) if not rect.empty else []

    def retire(self, rect: Rect, found) -> None:
        """PendingSums.retire: the sums `found` [(key, rect, value)] lose their part of
        `rect`; what is left of each goes to the end, piece by piece."""
        items, gone, heir = self._items, self._gone, self._heir
        if items is None:
            self._pending.retire(rect, found)
            return
        last = pieces = None
        for key, r, value in found:
            if r is not last:           # (one subtract per run of one rect object, as there)
                last, pieces = r, r.subtract(rect)
            del items[key]
            origin = key if key >= 0 else heir.pop(key, None)
            if origin is not None:
                if len(pieces) == 1:
                    heir[self._next] = origin
                else:
                    gone.append(origin)
            for piece in pieces:
                items[self._next] = (piece, value)
                self._next -= 1

    def close(self) -> None:
        """Put the result back into `pending` (the pieces left in the order they were made)."""
        pending, items, heir = self._pending, self._items, self._heir
        if items is None:
            return
        for i in self._gone:
            pending.remove(i)
        for key, (rect, value) in items.items():
            if key < 0:
                origin = heir.get(key)
                if origin is None:
                    pending.add(rect, value)
                else:
                    pending.replace(origin, rect)


_LAUNCH_SCAN = 32       # LaunchSums keeps up to this many sums in its dict
# ... or more, where the launch's first rect meets at least 1/_DENSE of them: each scan of
# the dict then costs about what the index's answer (and the retirement of each sum in it,
# ~30 scanned items' time) would, and the retirements leave the index alone. NMT @64's
# embedding gradient: each of 46 reductions meets all 2,560 sums (64 devices x 40 steps).
_DENSE = 8


def _scan_pays(rects, found) -> bool:
    """Whether LaunchSums keeps the sums `found` in its dict (see _LAUNCH_SCAN)."""
    n = len(found)
    if n <= _LAUNCH_SCAN:
        return True
    first = next(iter(rects))
    return not first.empty and len(scan_items(((i, (r, v)) for i, r, v in found), first)) \
        * _DENSE >= n
_OWN_SCAN = 48      # a device's pending sums up to this many: a dict, scanned
