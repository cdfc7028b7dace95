"""BufferAccesses: the accesses of one physical buffer (a region's instance or partial-sum
buffer on one device) that give a new access its true dependences: the last writer per piece
and the readers since. coherence.py keeps one per (region, device, partial?); this module
knows nothing of devices, copies or sums."""
from __future__ import annotations

from itertools import islice
from operator import attrgetter

from .geometry import Rect
from .rectindex import RectIndex, overlaps_any

# Whether a buffer starts in its aligned mode (BufferAccesses); off only to compare the two
# (tests/taskrt/test_aligned_buffers.py plans both ways and compares the graphs).
ALIGNED_BUFFERS = True
# Whether a buffer leaving the aligned mode tries the disjoint-writes mode first; off only
# to compare (tests/taskrt/test_buffer_accesses.py).
DISJOINT_WRITES = True
_ALIGNED_RECTS = 256    # a buffer with more distinct rects is made general (the test is O(n))
_MISSING = object()
_VOLUME = attrgetter("volume")
# A write cutting a written rect that more reads met than this makes the buffer general
# (its readers then in a RectIndex: a big rect read piece by piece and cut again and again
# would cost its reads at each cut).
_CUT_READS = 64


class BufferAccesses:
    """Accesses of one physical buffer: the last writer per piece, and the readers since,
    grouped by the rect they read (many tasks read the same part). The writers a read of a
    rect depends on are kept per rect until the next write (later launches read the parts
    earlier ones read).

    Aligned mode. While every rect the buffer has been accessed with is equal to or
    disjoint from every other (a device's part of each launch, the common case: the same
    part of each time step, read after it is written), no access ever splits a piece and a
    query of one of those rects finds at most the item of that rect. The buffer then keeps
    its writers and readers as dicts by rect, in the order their RectIndexes would hold
    them (a write moves its piece to the end, as RectIndex.renew and remove + add do), and
    answers by lookup; a new rect is checked once against the rects seen (`_seen`). The
    first rect that overlaps a seen one without being equal to it (or an empty rect) ends
    the aligned mode for good: the dicts become the RectIndexes, item by item in order,
    which is all of a RectIndex a query can tell (it answers in insertion order whatever
    its grid), so every mode gives the same predecessors.

    Disjoint-writes mode, between the two. `writers` is the RectIndex of disjoint written
    pieces the general mode would hold, and while every read lies within written pieces
    (a producer's part read piece by piece by copies; a reader's instance written piece by
    piece by copies, then read whole; sums read piece by piece by reduction copies), the
    readers a write of a piece depends on are the reads that met it since its last write:
    `_d` keeps them per piece, in lists, not in a second RectIndex. A write equal to a
    piece renews it; one disjoint from all adds one; one that cuts pieces (a reduction's
    result over the sums a task wrote) cuts them as the general mode does, each remaining
    piece keeping the reads that meet it. A read that meets
    unwritten elements, a cut of a written rect that many reads met (_CUT_READS), or an
    empty rect turns the buffer general: each kept read becomes a reader of its part of
    each written rect it met (the part of its rect that no write has since overwritten,
    which is what the general mode keeps of it). The aligned mode goes this way when its
    reads were all of written rects, else straight to general."""
    __slots__ = ("writers", "readers", "_writers_of", "_w", "_r", "_seen", "_unfiled", "_d",
                 "_last", "_after")

    def __init__(self):
        # rect -> its writers (until a write); disjoint-writes mode: (its writers, the
        # lists in _d of the pieces it met), for a rect meeting several
        self._writers_of: dict[Rect, set | tuple] = {}
        # General mode: reads [(rect, ref)] not yet entered in `readers` (_file_reads).
        self._unfiled: list = []
        # Disjoint-writes mode: written rect -> [(rect, ref)] of the reads that met it since
        # its last write (None in the other modes).
        self._d: dict | None = None
        self._last: Rect | None = None      # (_read_disjoint)
        # (_read_disjoint) written rect -> the written rect the next one-rect read met
        self._after: dict[Rect, Rect] | None = None
        if ALIGNED_BUFFERS:
            self._w: dict | None = {}                # rect -> last writer ref
            self._r: dict = {}                       # rect -> set of reader refs
            # [their bounding box, every rect accessed (pairwise disjoint)...]
            self._seen: list | None = [None]
            self.writers = self.readers = None
        else:
            self._w = None
            self.writers = RectIndex(disjoint=True)     # piece -> last writer ref
            self.readers = RectIndex()                  # rect -> set of reader refs

    def _aligned(self, rect: Rect) -> bool:
        """Whether the buffer stays aligned with `rect`, which is in neither dict, accessed: it
        is disjoint from every rect seen (else the buffer is made general)."""
        if not rect.empty:
            seen = self._seen
            box = seen[0]
            if box is None:
                seen[0] = rect
                seen.append(rect)
                return True
            # Parts are met in order (time steps, blocks), so a new one is mostly outside
            # the box of those seen: no rect-by-rect test.
            if not box.overlaps(rect) or not overlaps_any(islice(seen, 1, None), rect):
                seen[0] = box.union_bbox(rect)
                seen.append(rect)
                if len(seen) <= _ALIGNED_RECTS:
                    return True
        self._leave_aligned(not rect.empty and DISJOINT_WRITES)
        return False

    def _leave_aligned(self, disjoint: bool) -> None:
        """Leave the aligned mode: the dicts become the RectIndexes, in order; for the
        disjoint-writes mode (`disjoint`) when every rect read is a rect written."""
        writers = RectIndex(disjoint=True)
        w, r = self._w, self._r
        for rect, ref in w.items():
            writers.add(rect, ref)
        self.writers = writers
        self._w = self._r = self._seen = None
        self._writers_of.clear()        # (cached per mode)
        if disjoint and all(rect in w for rect in r):
            d = self._d = {rect: [] for rect in w}
            for rect, refs in r.items():
                d[rect] = [(rect, ref) for ref in refs]
            return
        readers = self.readers = RectIndex()
        for rect, refs in r.items():
            readers.add(rect, refs)

    def _general(self) -> None:
        """Leave the disjoint-writes mode: each read kept becomes a reader of its part of
        each written rect it met (module doc)."""
        d, self._d = self._d, None
        self._writers_of.clear()        # (cached per mode)
        self.readers = RectIndex()
        add = self._add_readers
        for written, reads in d.items():
            for rect, ref in reads:
                add(rect.intersect(written), (ref,))

    def _add_readers(self, rect: Rect, refs) -> None:
        known = self.readers.exact_value(rect)
        if known is None:
            self.readers.add(rect, set(refs))
        else:
            known.update(refs)

    def read(self, rect: Rect, ref) -> set:
        known = self._writers_of.get(rect)
        w = self._w
        if w is not None:
            r = self._r
            refs = r.get(rect)
            if known is None:
                n = w.get(rect, _MISSING)
                if n is not _MISSING:
                    known = self._writers_of[rect] = {n}
                elif refs is not None or self._aligned(rect):
                    known = self._writers_of[rect] = set()
            if known is not None:
                if refs is None:
                    r[rect] = {ref}
                else:
                    refs.add(ref)
                return set(known)
            known = None
        if self._d is not None:
            got = self._read_disjoint(rect, ref, known)
            if got is not None:
                return got
            known = None
        if known is None:
            known = self._writers_of[rect] = {n for _, _, n in self.writers.overlapping(rect)}
        # A read's preds are writers only: it is entered in `readers` when a write asks.
        self._unfiled.append((rect, ref))
        return set(known)

    def _read_disjoint(self, rect: Rect, ref, got) -> set | None:
        """read() in the disjoint-writes mode; None when it made the buffer general. A read
        inside the written rect the last one-rect read met (a producer's part, read piece
        by piece by copies; a piece many copies read) meets only it (written rects are
        disjoint): no query; nor one inside the written rect that a read met after one
        inside that rect before (`_after`: reads that walk the same pieces again and again,
        as a reduction's copies read each step's sum of a device, step by step, for each
        part summed). A rect meeting several, read before since the last write (a task's
        read of the pieces copies wrote), has them kept (`got`)."""
        d = self._d
        # `got`: _writers_of's (writers, the lists in _d of the written rects met) of a rect
        # met by several (a write, which renews a list, empties this cache first)
        if got is not None:
            item = (rect, ref)
            for reads in got[1]:
                reads.append(item)
            return set(got[0])
        last = self._last
        if last is not None and not rect.empty:
            if rect.intersect(last) is rect:
                d[last].append((rect, ref))
                return {self.writers.exact_value(last)}
            after = self._after
            if after is not None:
                # (a written rect still in `d`, holding `rect`, is the one it meets)
                nxt = after.get(last)
                if nxt is not None and nxt in d and rect.intersect(nxt) is rect:
                    self._last = nxt
                    d[nxt].append((rect, ref))
                    return {self.writers.exact_value(nxt)}
        found = self.writers.overlapping(rect)
        if len(found) == 1:
            _, written, writer = found[0]
            if rect.intersect(written) is not rect or rect.empty:
                self._general()
                return None
            if last is not None:
                if self._after is None:
                    self._after = {}
                self._after[last] = written
            self._last = written        # (the next read of `rect` finds it there)
            d[written].append((rect, ref))
            return {writer}
        met = [r for _, r, _ in found]
        # (a task reading the pieces copies wrote meets dozens: no Rect method per piece)
        if rect.empty or sum(map(_VOLUME, map(rect.intersect, met))) != rect.volume:
            self._general()
            return None
        lists = [d[r] for r in met]
        item = (rect, ref)
        for reads in lists:
            reads.append(item)
        got = self._writers_of[rect] = ({n for _, _, n in found}, lists)
        return set(got[0])

    def _write_disjoint(self, rect: Rect, ref) -> set | None:
        """write() in the disjoint-writes mode; None when it made the buffer general (an
        empty rect: no piece of the mode is empty). A write apart from every written piece
        keeps the writers found per rect (_writers_of): each rect there lies within written
        pieces (_read_disjoint checked it), so the new piece meets none of them (a reader's
        instance written step by step by copies, each step read forward and backward)."""
        if rect.empty:
            self._general()
            return None
        writers = self.writers
        i = writers.find_exact(rect)
        if i is None:
            found = writers.overlapping(rect)
            if not found:
                writers.add(rect, ref)
                self._d[rect] = []
                return set()
        if self._writers_of:
            self._writers_of.clear()
        if i is not None:
            preds = {writers.get(i)[1]}
            d = self._d
            reads = d[rect]
            if reads:
                preds.update([r for _, r in reads])
                d[rect] = []
            writers.renew(i, ref)
            preds.discard(ref)
            return preds
        d = self._d
        if any(len(d[r]) > _CUT_READS for _, r, _ in found):
            self._general()
            return None
        # Written rects cut (as the general mode cuts its pieces, in the same order): the
        # reads of each part outside `rect` stay with it, those meeting `rect` are preds.
        self._last = None
        preds = set()
        for i, r, n in found:
            preds.add(n)
            reads = d.pop(r)
            writers.remove(i)
            # (a read x kept with r meets r; boxes that meet pairwise meet all three, so x
            # meets r's part inside `rect` when it meets `rect`)
            for x, reader in reads:
                if x.overlaps(rect):
                    preds.add(reader)
            for piece in r.subtract(rect):
                writers.add(piece, n)
                d[piece] = [item for item in reads if item[0].overlaps(piece)]
        writers.add(rect, ref)
        d[rect] = []
        preds.discard(ref)
        return preds

    def _file_reads(self) -> None:
        """Enter the reads made since the last write in `readers`, in order: what each read
        did to it before it was deferred (only a write asks for readers, and a buffer
        many copies read but nothing writes again, a producer's part, never files them)."""
        readers = self.readers
        for rect, ref in self._unfiled:
            refs = readers.exact_value(rect)
            if refs is None:
                readers.add(rect, {ref})
            else:
                refs.add(ref)
        self._unfiled.clear()

    def write(self, rect: Rect, ref) -> set:
        if self._writers_of and self._d is None:    # (_write_disjoint clears it itself)
            self._writers_of.clear()
        w = self._w
        if w is not None:
            n = w.pop(rect, _MISSING)
            if n is not _MISSING:
                preds = {n}
            elif rect in self._r or self._aligned(rect):
                preds = set()
            else:
                preds = None                # made general: nothing was popped
            if preds is not None:
                refs = self._r.pop(rect, None)
                if refs is not None:
                    preds |= refs
                w[rect] = ref
                preds.discard(ref)
                return preds
        if self._d is not None:
            preds = self._write_disjoint(rect, ref)
            if preds is not None:
                return preds
        preds = set()
        if self._unfiled:
            self._file_reads()
        writers, readers = self.writers, self.readers
        found = writers.overlapping(rect)
        same = None             # the id of a piece equal to `rect`: it takes the new writer
        if len(found) == 1 and found[0][1] is rect:     # (disjoint: found by its rect)
            same, _, n = found[0]
            preds.add(n)
        else:
            for i, r, n in found:
                preds.add(n)
                writers.remove(i)
                for piece in r.subtract(rect):
                    writers.add(piece, n)
        for i, r, refs in readers.overlapping(rect):
            preds |= refs
            readers.remove(i)
            for piece in r.subtract(rect):
                self._add_readers(piece, refs)
        if same is None:
            writers.add(rect, ref)
        else:
            writers.renew(same, ref)
        preds.discard(ref)
        return preds
