"""The pieces of a read rect that a reduction leaves summed (coherence.py's _mark_summed):
each pending sum's part of the rect less what earlier sums covered, computed without
comparing most pairs: one device's sums are disjoint, parts equal to an earlier one of
another device add nothing, and one partition's parts are seen apart by a sweep."""
from __future__ import annotations

from operator import itemgetter

from .geometry import Rect, subtract_all
from .rectindex import RectIndex


def summed_pieces(rect: Rect, contribs, parts: list[Rect] | None = None) -> list[Rect]:
    """The part of `rect` that pending sums [(id, rect, (device, partial))] cover, as disjoint
    pieces: each sum's part of `rect` less what earlier sums covered, in order. One device's
    sums are disjoint (PendingSums), so a sum is compared only with other devices' pieces,
    and sums of one device alone (a gradient summed over time steps on its device) are
    their parts of `rect` as they are. `parts`: the sums' parts of `rect`, when known."""
    if parts is None:
        parts = [r.intersect(rect) for _, r, _ in contribs]
    devices = {dev for _, _, (dev, _) in contribs}
    if len(devices) == 1:
        return parts
    parts = [(p, dev) for p, (_, _, (dev, _)) in zip(parts, contribs)]
    # (crossed: these parts overlap across devices, known from the first sweep)
    crossed = len(parts) == len(devices)
    if crossed and not _cross_device_overlap(rect, parts):
        # The common case, another partition's sums (each device's part of a gradient):
        # no piece overlaps another device's, so none is cut.
        return [p for p, _ in parts]
    n = len(parts)
    parts = _first_of_equal(parts)
    crossed = crossed and len(parts) == n           # (the same parts swept again)
    if len({dev for _, dev in parts}) == 1 or \
            not crossed and not _cross_device_overlap(rect, parts):
        return [p for p, _ in parts]
    # The pieces found so far are disjoint (each is cut by the other devices' before it, and
    # one device's sums are disjoint), so an index of them answers "which overlap this sum".
    # Queried with each sum's part of `rect` (every piece found so far lies in `rect`, so
    # it meets the sum where it meets its part): a part equal to a piece found before (two
    # devices' sums of one rect, as from an operator split in a dimension it sums over) is
    # then found by the index's exact lookup alone.
    summed = RectIndex(disjoint=True)       # piece -> device of its sum, in order found
    out = []
    for part, dev in parts:
        done = [q for _, q, d in summed.overlapping(part) if d != dev]
        for piece in subtract_all(part, done):
            summed.add(piece, dev)
            out.append(piece)
    return out


def sums_apart(box: Rect, sums) -> bool:
    """Whether pending sums [(id, rect, (device, partial))], those meeting `box` (the bounding
    box of a launch's read rects), are one per device and none overlaps another: then each
    reduction of rects in `box`, in any order, sums its sums' parts (of what is left of
    them) as they are, i.e. summed_pieces of its parts is its parts: found once for a
    launch's reductions (pendingsums.LaunchSums) rather than by a sweep of each one's parts.
    (A reduction only shrinks the sums it reads.)"""
    devices = {dev for _, _, (dev, _) in sums}
    if not sums or len(devices) != len(sums):
        return False
    return len(sums) == 1 or \
        not _cross_device_overlap(box, [(r, dev) for _, r, (dev, _) in sums])


# LaunchSums.apart's values besides False and True: the sums met are apart once each sum of a
# rect an earlier one (of another device) has is left out (sums_apart_but_equal).
APART_BUT_EQUAL = 2


def launch_summed(rect: Rect, contribs, parts: list[Rect], apart) -> list[Rect]:
    """summed_pieces(rect, contribs, parts) of a reduction of a launch whose sums met are
    `apart` (LaunchSums.apart): its parts as they are (True), its parts less each equal to
    an earlier one of another device (APART_BUT_EQUAL), else by summed_pieces."""
    if apart is True:
        return parts
    if apart == APART_BUT_EQUAL:
        return [p for p, _ in _first_of_equal([(p, dev) for p, (_, _, (dev, _)) in
                                               zip(parts, contribs)])]
    return summed_pieces(rect, contribs, parts)


def sums_apart_but_equal(box: Rect, sums) -> bool:
    """Whether pending sums [(id, rect, (device, partial))] meeting `box` (as sums_apart's)
    are apart once each sum whose rect equals an earlier one's is left out (an operator split
    in a dimension it sums over: each device's sum of one rect; NMT's embedding gradients).
    Then each reduction of the launch sums its parts less each part equal to an earlier one
    of another device (launch_summed): a reduction retires the sums of one rect alike (each
    meets its rect or none does), leaving equal pieces in the same order (the sums' order),
    so at every reduction the parts are those of disjoint sums, each repeated by the devices
    of its rect's sums in one order; summed_pieces drops the repeats (_first_of_equal), and
    the parts left overlap no other device's, so no sweep cuts them."""
    first: dict = {}
    kept = [s for s in sums if first.setdefault(s[1], s[2][0]) == s[2][0]]
    return len(kept) < len(sums) and sums_apart(box, kept)


def _first_of_equal(parts) -> list:
    """`parts` [(part, device)] less each part equal to an earlier one of another device
    (every time step's sum of one rect on each device of an operator split in a dimension it
    sums over: NMT's `enc_embed@grad` reads 640 sums, 40 rects): such a part adds no piece.
    The earlier part's pieces are it less earlier pieces of devices other than its own, and
    none of those is of the later part's device (that device's sums are disjoint, and the
    later part is its sum's one part of `rect`), so they cover it whole."""
    first: dict = {}
    out = []
    for item in parts:
        if first.setdefault(item[0], item[1]) == item[1]:
            out.append(item)
    return out


def _cross_device_overlap(rect: Rect, parts) -> bool:
    """Whether two of `parts` [(part of `rect`, device)] of different devices overlap: a
    sweep along the dimension where the parts start at the most places (for the parts of
    one block partition, each part meets only its neighbours there). First in one pass:
    whether each part starts along d where or after every earlier part of another device
    ends (then none overlaps another device's; one device's time steps stacked across d,
    a gradient summed over a sequence's steps on each device of a batch split, pass
    here: the pairwise sweep cost ~40 comparisons a part at NMT @64)."""
    los = [p.lo for p, _ in parts]
    d = max(range(rect.ndim), key=lambda k: len(set(map(itemgetter(k), los))))
    order = sorted(parts, key=lambda x: x[0].lo[d])
    # The latest end along d of the parts so far, and the device of the part that set it:
    # every part of another device ends by where that part starts, so a part of that
    # device meets none of them there.
    top = top_dev = None
    for p, dev in order:
        if dev != top_dev and top is not None and p.lo[d] < top:
            break
        end = p.hi[d]
        if top is None or end > top:
            top, top_dev = end, dev
    else:
        return False
    active: list = []
    for p, dev in order:
        start = p.lo[d]
        active = [(q, e) for q, e in active if q.hi[d] > start]
        for q, e in active:
            if e != dev and q.overlaps(p):
                return True
        active.append((p, dev))
    return False
