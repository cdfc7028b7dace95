"""Recording and replaying a slab's source choices (slabplans.py): the only thing slabs of
one region share when planned apart is the count of elements each device has sent
(RegionPlanner._choose_source spreads copies by it), so a slab planned alone records its
choices (_RecordingPlanner), and another slab of its class gets its plan, moved, where every
choice comes out alike against the region's real counts (_follow); a slab where none
does is planned by itself (_OwnSlab, _ForcedPlanner). Also the checks a slab of a region whose
first entry was cut makes (_OneSum, _SumsMet: slabplans._cut_first).
"""
from __future__ import annotations

from .coherence import RegionPlanner
from .pendingsums import PendingSums
from .regionclasses import plan_alone
from .regionmemo import RegionPlan


class _RecordingPlanner(RegionPlanner):
    """A RegionPlanner that records, per launch's reads, each source choice it makes
    (holders, reader device, elements, chosen source) and the buffers it first touches
    there ((partial?, device), in order: the order of the region's instance_rects)."""

    def __init__(self, region, machine, one_sum: bool = False):
        super().__init__(region, machine)
        self.one_sum = one_sum
        if one_sum:
            self.state.pending = _OneSum()
        self.choices: dict[str, list] = {}
        self.touches: dict[str, list] = {}
        self._current: list = []
        self._touch: list | None = None

    def plan_reads(self, launch, reads) -> list:
        self._current = self.choices[launch.name] = []
        self._touch = self.touches[launch.name] = []
        try:
            return super().plan_reads(launch, reads)
        finally:
            self._touch = None

    def _instance_rect(self, device: int, rect, partial: bool = False) -> None:
        touch = self._touch
        if touch is not None and (partial, device) not in touch:
            touch.append((partial, device))
        super()._instance_rect(device, rect, partial)

    def _mark_summed(self, rect, device: int, contribs, parts) -> bool:
        if self.one_sum and len(parts) > 1 and all(p.volume != rect.volume for p in parts):
            raise _SumsMet                  # (the pieces left summed follow their order)
        return super()._mark_summed(rect, device, contribs, parts)

    _logs_choices = True        # (the compiled walk's choices come to _logged)

    def _choose_source(self, holders, device: int, elements: int) -> int:
        src = super()._choose_source(holders, device, elements)
        self._current.append((tuple(holders), device, elements, src))
        return src

    def _logged(self, choices: list) -> None:
        self._current.extend(choices)


class _SumsMet(Exception):
    """Planning a region whose first entry was cut met sums whose order could differ from
    planning it whole (_cut_first)."""


class _OneSum(PendingSums):
    """PendingSums of a slab of a region whose first entry was cut (_cut_first): a Red+
    finding two of its device's sums or more raises _SumsMet (planned whole, their order,
    the order of its targets, could differ)."""
    __slots__ = ()

    def of_device(self, device: int, rect: Rect) -> list:
        got = PendingSums.of_device(self, device, rect)
        if len(got) > 1:
            raise _SumsMet
        return got


class _OwnSlab:
    """Slab `k` planned by itself because one of its source choices differs from its class's:
    a RegionPlanner of its own (its state never meets another slab's) whose copies count in
    the region's shared `sent`, as planning the region whole counts them. Its parts before
    the one that differed replay the choices they matched (`forced`: per part, its choices;
    the replay already updated the counts) without counting them again. `parts`: per part
    planned so far, its choices (what a slab of its class must match to follow it)."""

    def __init__(self, region, machine, sent: dict, forced: list, k: int,
                 one_sum: bool = False):
        self.rp = rp = _ForcedPlanner(region, machine, one_sum)
        rp.sent = sent
        rp.forced = [c for part in forced for c in part]
        rp.forced.reverse()
        self.k = k
        self.parts: list = list(forced)
        self.nodes: list = []
        self.accesses: list = []
        self.lis: list = []
        self.names: list = []

    def plan(self, planner, name: str, entry: tuple) -> None:
        self.names.append(entry[1].name)
        got = plan_alone(planner, name, [entry], self.rp)
        self.nodes.append(got.nodes[0])
        self.accesses.append(got.accesses[0])
        self.lis.append(entry[0])
        if len(self.parts) < len(self.nodes):
            self.parts.append(self.rp.choices.get(entry[1].name, ()))

    @property
    def touches(self) -> list:
        touched = self.rp.touches
        return [touched.get(launch, ()) for launch in self.names]

    def region_plan(self, name: str) -> RegionPlan:
        size = sum(len(items) for items in self.nodes if items)
        return RegionPlan(self.rp, self.nodes, self.accesses, size, name, tuple(self.lis))


_NONE = object()        # (_follow: no plan to follow)


def _follow(choose, sent: dict, done: list, current, template: list, variants: list):
    """The plan a slab's next part (the `len(done)`th) follows: its current one (None: its
    class's `template` choices; else an _OwnSlab) or the template or an own slab of its
    class that made the same choices in every earlier part (`done`), whose recorded choices
    for this part (holders, device, elements, source) come out alike against the real counts
    (`choose`: each counted). Walked once, as a trie: where the real source differs from
    the plan followed, another plan that recorded the same choices so far and this source
    takes over. The part's choices are appended to `done`; _NONE where no plan fits (the
    part's counts taken back). A slab's plan is a function of its parts' translated
    signatures and the sources chosen: one whose choices are all another's of its class is
    that one's plan, moved."""
    j = len(done)
    cands = []
    for cand in [current] + ([None] if current is not None else []) + \
            [v for v in reversed(variants) if v is not current]:
        parts = template if cand is None else cand.parts
        if len(parts) > j and (cand is current or all(
                a is b or a == b for a, b in zip(parts, done))):
            cands.append((cand, parts[j]))
    if not cands:
        return _NONE
    cand, recorded = cands[0]
    made = []                                   # (elements, source) counted
    i = 0
    while i < len(recorded):
        holders, device, elements, src = recorded[i]
        got = choose(holders, device, elements)
        made.append((elements, got))
        if got != src:
            want = (holders, device, elements, got)
            for other, theirs in cands:
                if len(theirs) > i and theirs[i] == want and theirs[:i] == recorded[:i]:
                    cand, recorded = other, theirs
                    break
            else:
                for n, counted in made:
                    # (a copy of no elements is counted too: its holder may have had none)
                    left = sent.get(counted, 0) - n
                    if left:
                        sent[counted] = left
                    else:
                        sent.pop(counted, None)
                return _NONE
        i += 1
    done.append(recorded)
    return cand


class _ForcedPlanner(_RecordingPlanner):
    """A _RecordingPlanner that first takes its source choices from `forced` (reversed; each
    checked against what is asked), not counting them, then chooses by the counts."""

    def __init__(self, region, machine, one_sum: bool = False):
        super().__init__(region, machine, one_sum)
        self.forced: list = []

    def _forced_choices(self) -> list:
        return self.forced              # (the compiled walk pops those it takes)

    def _choose_source(self, holders, device: int, elements: int) -> int:
        if not self.forced:
            return super()._choose_source(holders, device, elements)
        want, want_device, want_elements, src = self.forced.pop()
        assert (tuple(holders), device, elements) == (want, want_device, want_elements), \
            "a slab replayed differently from its class"
        return src
