"""Re-planning a region slab by slab: the time steps of a sequence model's region planned once.

An LSTM is one operator with a launch per time step, so its activations and their gradients
are regions holding every step, and a change of its config re-plans regions whose logs ask
the same things of each step's slice (NMT@16: 40 steps, ~10k copies and reductions a region).
When every access rect of a region's log stays inside one slab along some dimension (the
slabs: the unions of overlapping extents there), and each log entry reads inside one slab
(a recurrent step reads step t-1 and writes step t: two slabs, reads in one), the slabs are
planned independently of each other by coherence.py (valid pieces, pending sums and every
buffer's accesses of one slab never meet another's; rect operations commute with a shift,
and a RectIndex answers in insertion order whatever its grid) except for one shared count,
the elements each device has sent (`RegionPlanner._choose_source` spreads copies by it).
Slabs whose entries ask alike, translated to the slab's start, form a class; `slab_plan`
plans each class's first slab alone (`plan_alone`), recording every source choice, then
replays all slabs' choices in log order against the region's real counts: if each comes out
as recorded, every slab's plan is its class's plan translated (`stamp` with a rect shift),
node for node what planning the region whole gives; a slab where one does not follows
another slab of its class planned by itself whose choices it made in every earlier part and
makes in this one (slabreplay._follow: counts cycle among holders, so steps repeat a few
patterns; rnn_l0 of RNNLM@16: about 6 in 10 such slabs), else it is planned by itself from
that part on (_OwnSlab: its own RegionPlanner, whose copies count in the
region's shared counts in log order, as planning whole counts them; its parts before the one
that differed replay their recorded choices, which matched). Only for regions without
initial data and with no sums left pending at the end (the end state's pending order would
interleave the slabs). A first entry summing into every slab (attention's backward into an
LSTM's output) is cut at the slabs where that is exact (_cut_first). Of the dimensions that
split every access (for a cut first entry: every later one), the one with the most slabs
where each entry reads in one slab is taken (NMT @64: the LSTM's 64 batch parts outnumber
its 40 steps, but each step reads in every batch slab).

The RegionPlanner it leaves (SlabbedEnd) holds the end state the graph and the simulator read
(valid pieces, the instances' bounding rects in the order planning whole meets them, the sent
counts) but not the buffers' accesses, so it is frozen: a later launch re-plans the region
alone first (regionplans.own_planner).
"""
from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from operator import attrgetter, itemgetter

from .coherence import RegionPlanner
from .errors import PlanError
from .geometry import Rect, rect_mover
from .privilege import RED as _RED, RegionRequirement
from .regionclasses import plan_alone, stamp
from .regionmemo import RegionPlan
from .slabreplay import _NONE, _OwnSlab, _RecordingPlanner, _SumsMet, _follow
from .taskgraph import ReduceTarget

# Off only to compare with planning regions whole (tests/taskrt/test_slab_plans.py).
SLAB_PLANS = True
# Why slab_plan left regions to be planned whole, by reason, over the process (counts only:
# tools/replan_regions.py reports them).
REFUSED: Counter = Counter()
# Slabs planned by themselves (a source choice differed from their class's), over the process.
OWN_SLABS = [0]
# Slabs given the plan of such a slab of their class, moved (their choices all its), over the
# process.
FOLLOWED = [0]


def _refuse(reason: str) -> None:
    REFUSED[reason] += 1


def slab_plan(planner, name: str, log) -> RegionPlan | None:
    """Region `name`'s plan over `log` made slab by slab (module doc), or None where that does
    not apply (the reason counted in REFUSED)."""
    if not SLAB_PLANS:
        return None
    if len(log) < 2 or planner.initial.get(name):
        return _refuse("one entry or initial data")
    plans = planner.plans
    region = planner.regions[name]
    # The dimension: of those splitting every access, the one with the most slabs where each
    # entry reads in one slab (so that its read nodes are that slab's).
    splits = _splits(region, log)
    split = _reading_in_one(log, splits)
    whole_log = cut = None
    if split is None:
        # A first entry of sums over every slab (attention's backward into an LSTM's
        # output): planned cut at the slabs of the rest (_cut_first).
        cut = _cut_first(region, log)
        if cut is None:
            return _refuse("an entry reads in several slabs" if splits else
                           "no dimension splits every access")
        whole_log, (log, split) = log, cut
    d, starts = split[0], split[1]
    # Each entry's part in each slab it touches (its accesses there), and per slab the
    # signatures of its parts translated to the slab's start (what decides its plan:
    # regionmemo.key_signature).
    parts_of: list[list] = [[] for _ in starts]         # per slab: (entry, access positions)
    sigs: list[list] = [[] for _ in starts]
    where: list[list] = []              # per entry: (slab, index in its parts, positions)
    at_d = itemgetter(d)
    for e, (li, reads, accesses) in enumerate(log):
        lp = plans[li]
        points = lp.points
        by_slab = _by_slab(list(map(at_d, map(_lo, map(_rect, map(_third, accesses))))), starts)
        mine = []
        for k, positions in by_slab.items():
            base = starts[k]
            sig = [lp.launch.replicas]
            for a in positions:
                pi, kk, req = accesses[a]
                r = req.rect
                lo, hi = list(r.lo), list(r.hi)
                lo[d] -= base
                hi[d] -= base
                sig.append((pi, kk, points[pi][1], tuple(lo), tuple(hi), req.privilege.code))
            mine.append((k, len(parts_of[k]), positions))
            parts_of[k].append((e, positions))
            sigs[k].append(tuple(sig))
        where.append(mine)
    classes: dict[tuple, list[int]] = {}
    for k, sig in enumerate(sigs):
        classes.setdefault(tuple(sig), []).append(k)
    if 2 * len(classes) > len(starts):
        # Planning the classes' first slabs would cost over half of planning the region
        # whole, which a differing source choice then adds.
        return _refuse("too many classes")
    members = list(classes.values())
    class_of = [0] * len(starts)
    for c, ks in enumerate(members):
        for k in ks:
            class_of[k] = c
    # Step 1: each class's first slab planned alone, its source choices recorded.
    templates, choices, touches = [], [], []    # per class: its plan; per part: what it did
    for ks in members:
        rp = _RecordingPlanner(region, planner.machine, cut is not None)
        entries = [_entry(plans, log, e, parts_of[ks[0]], name)
                   for e in range(len(parts_of[ks[0]]))]
        try:
            plan = plan_alone(planner, name, entries, rp)
        except PlanError:
            return _refuse("an error")  # planned whole, it raises what the user should see
        except _SumsMet:
            return _refuse("a cut first entry's sums met others")
        if len(rp.state.pending):
            return _refuse("sums left pending")
        templates.append(plan)
        choices.append([rp.choices.get(launch.name, ()) for _, launch, *_ in entries])
        touches.append([rp.touches.get(launch.name, ()) for _, launch, *_ in entries])
    # Step 2: every slab's source choices, in log order, against the region's real counts;
    # a slab whose choice differs from its class's follows the plan of another slab of its
    # class planned by itself whose choices so far are its own (_follow), else is planned by
    # itself from then on (_OwnSlab), its choices made against the same counts as planning
    # whole makes them.
    final = SlabbedEnd(region, planner.machine)
    sent, choose = final.sent, final._choose_source
    own: dict[int, _OwnSlab] = {}
    variants: list[list] = [[] for _ in members]    # per class: its own slabs, as made
    follows: list = [None] * len(starts)    # per slab: the own slab it follows (None: class's)
    done: list[list] = [[] for _ in starts]     # per slab: its parts' choices, replayed
    for mine in where:
        for k, j, _ in mine:
            slab = own.get(k)
            if slab is None:
                c = class_of[k]
                got = _follow(choose, sent, done[k], follows[k], choices[c], variants[c])
                if got is not _NONE:
                    follows[k] = got
                    continue
                slab = own[k] = _OwnSlab(region, planner.machine, sent, done[k], k,
                                         cut is not None)
                variants[c].append(slab)
                try:
                    for before in range(j):
                        slab.plan(planner, name, _entry(plans, log, before, parts_of[k], name))
                except _SumsMet:
                    return _refuse("a cut first entry's sums met others")
            try:
                slab.plan(planner, name, _entry(plans, log, j, parts_of[k], name))
            except _SumsMet:
                return _refuse("a cut first entry's sums met others")
    if any(len(slab.rp.state.pending) for slab in own.values()):
        return _refuse("sums left pending")
    # Step 3: each slab gets its class's plan, translated (or its own plan); the end state
    # is put together.
    per_slab, slab_touches = [], []
    own_plans = {k: slab.region_plan(name) for k, slab in own.items()}
    for k, start in enumerate(starts):
        first = members[class_of[k]][0]
        template = templates[class_of[k]]
        slab = own.get(k)
        if slab is not None:
            per_slab.append(own_plans[k])
            slab_touches.append(slab.touches)
            final.slabs.append((slab.rp, d, 0))
            continue
        slab = follows[k]
        if slab is not None:
            # (its choices were all those of own slab `slab.k`: that plan, translated)
            lis = [log[e][0] for e, _ in parts_of[k]]
            per_slab.append(stamp(own_plans[slab.k], region, lis,
                                  [plans[li].launch.name for li in lis],
                                  rect_mover(d, start - starts[slab.k])))
            slab_touches.append(slab.touches)
            final.slabs.append((slab.rp, d, start - starts[slab.k]))
            FOLLOWED[0] += 1
            continue
        if k == first:
            per_slab.append(template)
        else:
            lis = [log[e][0] for e, _ in parts_of[k]]
            per_slab.append(stamp(template, region, lis, [plans[li].launch.name for li in lis],
                                  rect_mover(d, start - starts[first])))
        slab_touches.append(touches[class_of[k]])
        final.slabs.append((template.planner, d, start - starts[first]))
    OWN_SLABS[0] += len(own)
    nodes, per_entry, size = [], [], 0
    for (li, _, accesses), mine in zip(log, where):
        if len(mine) == 1 and len(mine[0][2]) == len(accesses):
            # (most entries: all in one slab, its part's accesses in the entry's order)
            k, j, _ = mine[0]
            items = per_slab[k].nodes[j]
            nodes.append(items)
            size += len(items) if items else 0
            per_entry.append(list(per_slab[k].accesses[j]))
            continue
        items = None
        got: list = [None] * len(accesses)
        for k, j, positions in mine:
            plan = per_slab[k]
            if plan.nodes[j] is not None:
                items = plan.nodes[j]
            for a, pt in zip(positions, plan.accesses[j]):
                got[a] = pt
        if len(mine) > 1:
            # A point's preds on the region are those of all its accesses (_plan_accesses).
            union: dict[int, set] = {}
            for (pi, _, _), (preds, _) in zip(accesses, got):
                union.setdefault(pi, set()).update(preds)
            got = [(tuple(union[pi]), targets)
                   for (pi, _, _), (_, targets) in zip(accesses, got)]
        nodes.append(items)
        size += len(items) if items else 0
        per_entry.append(got)
    if not _bounding_rects(final, log, plans, where, per_entry, slab_touches):
        return _refuse("buffers met in another order")
    if whole_log is not None:
        # The first entry's sums, cut: each went straight into its device's instance
        # (planned whole, each requirement's one target), with no preds (a first write).
        for (preds, targets), (_, _, req) in zip(per_entry[0], log[0][2]):
            if preds or targets != (ReduceTarget(req.rect, False, False),):
                return _refuse("a cut first entry's sums met others")
        per_entry[0] = [((), (ReduceTarget(req.rect, False, False),))
                        for _, _, req in whole_log[0][2]]
    return RegionPlan(final, nodes, per_entry, size, name, tuple(li for li, _, _ in log))


def _by_slab(at: list, starts: list) -> dict:
    """{slab: positions in `at`} for a log entry's access rects' lo along d (`at`), slabs in
    the order first met: what bisecting each in `starts` gives. All in one slab (most
    entries) is seen from the least and the greatest alone (bisect is monotone)."""
    if not at:
        return {}
    k = bisect_right(starts, min(at))
    if k == bisect_right(starts, max(at)):
        return {k - 1: range(len(at))}
    by_slab: dict[int, list[int]] = {}
    for a, lo in enumerate(at):
        k = bisect_right(starts, lo) - 1
        got = by_slab.get(k)
        if got is None:
            by_slab[k] = [a]
        else:
            got.append(a)
    return by_slab


def _entry(plans, log, e, parts, name) -> tuple:
    """Part `e` of a slab (`parts`: its [(log entry, access positions)]) as plan_alone takes
    an entry: (li, launch, points, reads, accesses) with its accesses of the slab only."""
    entry, positions = parts[e]
    li, reads, accesses = log[entry]
    lp = plans[li]
    mine = [accesses[a] for a in positions]
    has_reads = reads and any(req.privilege.reads for _, _, req in mine)
    return (li, lp.launch, lp.points, {name: reads} if has_reads else {}, {name: mine})


def _reading_in_one(log, splits):
    """The first of `splits` [(d, starts, ends)] along which each log entry's reads lie in
    one slab, or None."""
    for split in splits:
        at_d, starts = itemgetter(split[0]), split[1]
        if all(len(_by_slab(list(map(at_d, map(_lo, map(_third, reads)))), starts)) < 2
               for _, reads, _ in log if reads):
            return split
    return None


def _splits(region, log) -> list:
    """[(d, slab starts, slab ends)] for each dimension along which the log's access rects
    fall into two slabs or more (a slab: a union of rects' extents there), the most slabs
    first (then the lower d)."""
    rects = []
    for _, _, accesses in log:
        rects += map(_rect, map(_third, accesses))
    if any(map(_empty, rects)):
        return []
    los, his = list(map(_lo, rects)), list(map(_hi, rects))
    out = []
    for d in range(region.rect.ndim):
        at = itemgetter(d)
        found = set(zip(map(at, los), map(at, his)))         # (by C loops)
        merged: list[list[int]] = []
        for a, b in sorted(found):
            if merged and a < merged[-1][1]:
                if b > merged[-1][1]:
                    merged[-1][1] = b
            else:
                merged.append([a, b])
        if len(merged) > 1:
            out.append((-len(merged), d, [a for a, _ in merged], [b for _, b in merged]))
    return [split[1:] for split in sorted(out, key=itemgetter(0, 1))]


_empty, _lo, _hi = attrgetter("empty"), attrgetter("lo"), attrgetter("hi")
_rect, _third = attrgetter("rect"), itemgetter(2)      # (an access's req, a read's rect)


def _cut_first(region, log):
    """(the log with its first entry's accesses cut at the slabs, (d, starts, ends)) where
    only the first entry spans slabs and it may be planned cut, else None.

    Planned whole, a first entry of Red+ accesses only (no reads, no initial data, no two of
    one device overlapping: each sum straight into its device's instance, which slab_plan
    checks) leaves sums P spanning the slabs of the rest. Where the later rects' extents in
    each dimension before d are equal or disjoint (cells q of a grid), a later rect r lies in
    one block q x slab, and Rect.subtract (dimension by dimension: below and above r, each
    limited to r in the dimensions before) cuts a fragment F of P so that its part in every
    other block stays in one piece, with F's extent after d, and its pieces in r's block are
    those of F's part there less r. So by induction each block holds the same sums' parts,
    planned whole or cut, and every query (a later rect, in one block) finds the same sums
    with the same parts. Only their order can differ (planned whole, a sum retired in one
    slab moves behind the others in every slab), which matters only where a reduction leaves
    several parts of its rect summed (_RecordingPlanner._mark_summed) or a Red+ finds several
    of its device's sums (_OneSum): there the region is planned whole."""
    li0, reads0, first = log[0]
    if reads0 or len(log) < 3 or any(req.privilege is not _RED or req.rect.empty
                                     for _, _, req in first):
        return None
    # (of the dimensions splitting the rest, the one with the most slabs where each later
    # entry reads in one)
    split = _reading_in_one(log[1:], _splits(region, log[1:]))
    if split is None:
        return None
    d, starts, ends = split
    if not _grid_before(log[1:], d) or _sums_meet(first, log[1:], d):
        return None
    cut = []
    for pi, k, req in first:
        r = req.rect
        covered = 0
        for s, e in zip(starts, ends):
            lo, hi = max(s, r.lo[d]), min(e, r.hi[d])
            if lo < hi:
                covered += hi - lo
                a, b = list(r.lo), list(r.hi)
                a[d], b[d] = lo, hi
                cut.append((pi, k, RegionRequirement(req.region, Rect(tuple(a), tuple(b)),
                                                      _RED)))
        if covered != r.hi[d] - r.lo[d]:
            return None                     # (part of it in no slab)
    return [(li0, reads0, cut)] + list(log[1:]), split


def _sums_meet(first, log, d: int) -> bool:
    """Whether a later read rect meets two or more of the first entry's sums, none of them
    covering it (apart from d): its reduction would leave several parts summed, and
    slab_plan refuse the cut plan after planning its templates (a quick look first)."""
    sums = {_across(req.rect, d) for _, _, req in first}
    if len(sums) < 2:
        return False
    seen = set()
    for _, reads, _ in log:
        for _, _, r in reads or ():
            q = _across(r, d)
            if q in seen:
                continue
            seen.add(q)
            met = [p for p in sums if _meets(p, q)]
            if len(met) > 1 and not any(_covers(p, q) for p in met):
                return True
    return False


def _across(r: Rect, d: int) -> tuple:
    """A rect's extent in every dimension but d: (lo, hi) tuples."""
    return r.lo[:d] + r.lo[d + 1:], r.hi[:d] + r.hi[d + 1:]


def _meets(p: tuple, q: tuple) -> bool:
    return all(a < y and x < b for a, b, x, y in zip(p[0], p[1], q[0], q[1]))


def _covers(p: tuple, q: tuple) -> bool:
    """Whether extent p covers extent q."""
    return all(a <= x and y <= b for a, b, x, y in zip(p[0], p[1], q[0], q[1]))


def _grid_before(log, d: int) -> bool:
    """Whether the log's access and read rects' extents in each dimension before d are
    pairwise equal or disjoint (their boxes there: cells of one grid)."""
    for j in range(d):
        spans = set()
        for _, reads, accesses in log:
            for _, _, req in accesses:
                spans.add((req.rect.lo[j], req.rect.hi[j]))
            for _, _, r in reads or ():
                spans.add((r.lo[j], r.hi[j]))
        ordered = sorted(spans)
        for (_, b), (c, _) in zip(ordered, ordered[1:]):
            if c < b:
                return False
    return True


def _bounding_rects(final, log, plans, where, per_entry, slab_touches) -> bool:
    """`final`'s instance_rects and partial_rects: per device the bounding box of its slabs',
    in the order planning the region whole touches them: per log entry, the buffers its
    reads touched (recorded per slab part: `slab_touches`), then per access its device's
    instance,
    or for a Red+ the buffers of its targets."""
    order: dict[tuple, None] = {}
    for (li, _, accesses), mine, got in zip(log, where, per_entry):
        for k, j, _ in mine:
            for key in slab_touches[k][j]:
                order.setdefault(key)
        points = plans[li].points
        for (pi, _, req), (_, targets) in zip(accesses, got):
            device = points[pi][1]
            if targets is None:
                order.setdefault((False, device))
            else:
                for t in targets:
                    order.setdefault((t.partial, device))
    # A buffer's box over the slabs: its rect in each distinct slab plan moved by that plan's
    # least and greatest delta along d (the union of a rect's moves along one dimension is
    # the rect stretched there), then those few boxes joined (Rect.union_bbox ignores an
    # empty rect; access rects are never empty here, so none is expected: else refuse).
    moves: dict[tuple, dict] = {}           # (partial, device) -> {id(rect): [rect, d, lo, hi]}
    for rp, dd, delta in final.slabs:
        for partial, rects in ((False, rp.instance_rects), (True, rp.partial_rects)):
            for device, r in rects.items():
                got = moves.setdefault((partial, device), {}).get(id(r))
                if got is None:
                    if r.empty:
                        return False
                    moves[partial, device][id(r)] = [r, dd, delta, delta]
                elif got[1] != dd:
                    return False            # (one d for every slab: not expected)
                elif delta < got[2]:
                    got[2] = delta
                elif delta > got[3]:
                    got[3] = delta
    boxes: dict[tuple, Rect] = {}
    for key, found in moves.items():
        box = None
        for r, dd, least, most in found.values():
            if least or most:
                lo, hi = list(r.lo), list(r.hi)
                lo[dd] += least
                hi[dd] += most
                r = Rect(tuple(lo), tuple(hi))
            box = r if box is None else box.union_bbox(r)
        boxes[key] = box
    if order.keys() != boxes.keys():
        return False                        # (not expected: then plan the region whole)
    for key in order:
        (final.partial_rects if key[0] else final.instance_rects)[key[1]] = boxes[key]
    return True


class SlabbedEnd(RegionPlanner):
    """The end state of a region planned slab by slab: its slabs' end states (each its
    class's RegionPlanner moved along d), the instances' and partial buffers' bounding rects
    (in the order planning the region whole would have met them), the sent counts. It holds
    no buffers' accesses and is never planned further (frozen)."""

    def __init__(self, region, machine):
        super().__init__(region, machine)
        self.slabs: list[tuple] = []        # (class's RegionPlanner, d, delta)

    def final_valid(self) -> list[tuple[Rect, tuple[int, ...]]]:
        out = []
        for rp, d, delta in self.slabs:
            shift = rect_mover(d, delta) if delta else None
            for _, r, holders in rp.state.valid:
                out.append((shift(r) if shift else r, tuple(sorted(holders))))
        return sorted(out, key=lambda x: (x[0].lo, x[0].hi))

    def final_pending(self) -> list:
        return []                           # (slab_plan requires none)
