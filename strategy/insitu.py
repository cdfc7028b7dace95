"""Task times in situ and the machine's contention, from the task events of recorded runs
(strategy/calibration.py's first step; docs/simulator.md).

  insitu_profile / insitu_times   per cost key, the median of its events without the
                   preempted ones (more than PREEMPTED times what the line from the
                   profiler's times expects), and that line for the keys no run timed;
  contention       wall seconds per second of work, the events against their keys' times;
  slice_length     how long a preemption held a task up;
  deflate_long_keys  with the load the OS counted per run: the work of keys preempted in
                   every event (events / load, a rare long wait shared by them), and of
                   the keys no run timed (a line fitted to work, not to events), bounded by
                   their operator's in-situ work per FLOP at the shapes the runs timed,
                   and for an operator without FLOPs by their time alone at the ratio
                   of its timed shape nearest in time alone (price_unseen_by_operator);
  in_events        the part of a run's load that stretched its events: on ranks outnumbering
                   the cores, not the job's own sharing of them (strategy/cores.py's);
  rank_speeds      on several ranks, how fast each rank ran beside the others in one
                   recorded iteration (preemption.expected_makespan draws them).
"""
from __future__ import annotations

import math
import statistics

import numpy as np

from taskrt.taskgraph import TASK

from .costs import Profile
from .costs.profile import Measurement
from .replay import task_durations


def _line(xs, ys, most: int = 400) -> tuple[float, float]:
    """(a, b) >= 0 of y = a + b x, robustly (Theil-Sen: b the median slope of the pairs of
    points of different x, a the median of y - b x), so that a message that waited or a
    preempted event does not tilt it; at most `most` points (evenly spaced) are paired."""
    x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    if len(x) > most:
        pick = np.linspace(0, len(x) - 1, most).astype(int)
        x, y = x[pick], y[pick]
    i, j = np.triu_indices(len(x), 1)
    dx = x[j] - x[i]
    ok = dx != 0
    if not ok.any():
        return max(0.0, float(np.median(y))), 0.0
    b = max(0.0, float(np.median((y[j] - y[i])[ok] / dx[ok])))
    return max(0.0, float(np.median(y - b * x))), b



def alone_s(base: Profile | None, key) -> float | None:
    """The profiler's time of `key` alone, as the in-situ fit uses it: its fastest repeat.
    On a shared machine the median of a few repeats can be a preemption, not the work: at a
    load of 15 on 2 cores an AlexNet convolution's backward took 1.9 ms at best and 26.7
    ms in 3 of its 5 repeats, and priced from that median a strategy of such keys the runs
    never timed was predicted 3x too slow. None for a key the base lacks."""
    m = base.get(key, "cpu") if base is not None else None
    if m is None:
        return None
    return m.min_s if 0 < m.min_s <= m.seconds else m.seconds


# An event more than this many times its key's expected time (the line from the profiler's
# time alone) was preempted: on 2 cores at a load of 7, a 0.3 ms task event took 10 ms.
PREEMPTED = 3.0


def insitu_profile(runs, base: Profile | None = None) -> tuple[Profile, tuple | None, int]:
    """(profile, (a, f) or None, keys scaled): the runs' task times per cost key, and with a
    base profile (the profiler's times alone) the line in-situ = a + f * alone that prices
    the keys the runs did not see.

    Per key the median of its events: the task's work, without the preemptions a shared
    machine lands on a few events of an iteration (contention() measures those apart). The
    line is fitted over every event of a key the base has (Theil-Sen: robust to the
    preempted ones), and an event more than PREEMPTED times the line's value for its key is
    left out of the key's median: a key with one or two events in the runs is otherwise
    priced by the one preemption that hit it (a 0.3 ms task at 10 ms)."""
    meta = {"runs": [{"source": "calibrate", "trace": r.path, "app": r.app, "argv": r.argv,
                      "kind": "cpu", "layout": f"{r.ranks}x{r.per_rank}"} for r in runs]}
    return insitu_times(run_durations(runs), base, meta)


def insitu_times(durations: dict, base: Profile | None, meta: dict | None = None
                 ) -> tuple[Profile, tuple | None, int]:
    """insitu_profile's fit from {cost key: [event seconds]}."""
    prof = Profile(meta=meta or {})
    line = None
    if base is not None:
        pairs = [(alone_s(base, k), d) for k, ds in durations.items()
                 if alone_s(base, k) is not None for d in ds]
        if len({x for x, _ in pairs}) >= 3:
            line = _line(*zip(*pairs), most=2000)
    for key, ts in durations.items():
        alone = alone_s(base, key) if line is not None else None
        kept = ts
        if alone is not None:
            expected = line[0] + line[1] * alone
            kept = [t for t in ts if t <= PREEMPTED * expected]
        value = statistics.median(kept) if kept else expected
        prof.add(key, "cpu", Measurement(value, len(ts), min(ts), max(ts)))
    if line is None:
        return prof, None, 0
    a, f = line
    scaled = 0
    for key in base.keys("cpu"):
        if prof.get(key, "cpu") is None:
            m, x = base.get(key, "cpu"), alone_s(base, key)
            prof.add(key, "cpu", Measurement(a + f * x, m.repeats, a + f * m.min_s,
                                             a + f * m.max_s))
            scaled += 1
    for key, w in base.work.items():
        prof.work.setdefault(key, w)
    return prof, (a, f), scaled


def run_durations(runs) -> dict:
    """{cost key: [seconds of each of its task events in the runs]} (work_durations)."""
    durations: dict = {}
    for r in runs:
        work_durations(r, durations)
    return durations


def work_durations(run, into: dict | None = None) -> dict:
    """{cost key: [seconds]} of a recorded run's task events, less the executor's time in
    each that its key does not set (`run.executor_s`, {node id: seconds}: the views it
    re-sliced, strategy/reslicing.py), kept at 10% of the event at least, over the
    multiplier its rank's repetition gives it (`run.task_scale`, {node id: x},
    strategy/repetition.py)."""
    extra = getattr(run, "executor_s", None)
    scale = getattr(run, "task_scale", None) or {}  # its rank's repetition (repetition.py)
    if not extra and not scale:
        return task_durations(run.graph, run.events, into)
    extra = extra or {}
    durations = {} if into is None else into
    nodes = run.graph.nodes
    for e in run.events:
        if e.get("ph") == "X" and "node" in (e.get("args") or {}):
            i = int(e["args"]["node"])
            if nodes[i].kind is TASK:
                d = e["dur"] / 1e6
                durations.setdefault(nodes[i].cost_key, []).append(
                    max(0.1 * d, d - extra.get(i, 0.0)) / scale.get(i, 1.0))
    return durations


def contention(durations: dict, profile: Profile) -> float:
    """Wall seconds per second of work on this machine when the runs were recorded: the
    task events' total time over what they take at their key's time in `profile`
    (insitu_profile: the median of the events not preempted). A task event is the
    thread's own work (no wait for a message is inside it), so what it takes beyond its key's
    typical time is the OS running other processes on the core (on 2 cores at a load of 7,
    a few 4-9 ms preemptions an iteration, landing on whichever task runs). It applies to
    everything a host thread does, tasks and the executor's own time alike."""
    total = sum(sum(ts) for ts in durations.values())
    typical = sum(profile.get(k, "cpu").seconds * len(ts) for k, ts in durations.items())
    return max(1.0, total / typical) if typical > 0 else 1.0


def deflate_long_keys(runs, profile: Profile, base: Profile | None, slice_s: float,
                      loads: dict, cores: int | None = None) -> float:
    """The contention the OS counted (the median over the runs of `loads`), and the work of
    the long keys in `profile`, each run's events deflated by the part of its load that
    stretched them (in_events: with `cores`, the cores the runs' ranks shared and their
    sharing priced by strategy/cores.py, not what the job's own ranks made). A key's median is
    its work only if most of its events ran without a preemption, which holds for tasks short
    beside the slices: one of w seconds is preempted with probability about w (c - 1) / slice.
    A longer key (AlexNet's 10-30 ms convolutions at a load of 8 on 2 cores: every event
    preempted several times) has its events stretched by its run's c on average: its work is
    the mean of its events / c, but a rare long wait is shared by the run's long keys, not
    priced into the key it landed on (pooled_work). The keys no run timed are priced by the
    line fitted to the timed keys' work (price_unseen_by_work), and the long keys no run timed
    get the profiler's time times the median ratio of work to the profiler's time of the keys
    the runs did time that are long in the profiler too (its fastest repeat, alone_s, expecting
    a slice per repeat at the median load): those repeats were stretched alike, all of them
    preempted (without such keys, the ratio is 1 / the load: the profiler ran at the runs'
    load). Keys short in the profiler keep the line fitted on the short ones (their fastest
    repeat is their work). Mixing the two priced AlexNet's first convolution (its fastest
    repeat 53 ms, stretched; in situ 8-12 ms of work) at 87 ms with the ratio of 2 ms keys
    (1.6) on 4 logical devices. A key long in some runs and short in others (a load of 1.14 in
    one, 1.00 in the rest: a slice of 0.12 ms makes keys from 0.2 ms long in the first only) is
    priced by all its events, each run's estimate weighted by its events: pooled work where it
    is long, the median of its events where it is short.
    """
    deflate([(work_durations(r), in_events(loads[r.path], r.ranks, cores)) for r in runs],
            profile, base, slice_s)
    return statistics.median(loads[r.path] for r in runs)


def in_events(c: float, ranks: int, cores: int | None) -> float:
    """The part of a run's contention c (the OS's count over its ranks, (CPU + run-queue
    wait) / CPU) to deflate its long keys' events by: all of it on one process, where the
    ranks have a core each, or with `cores` None (no per-rank sharing modelled); where the
    ranks outnumber the cores, only what the job's own ranks cannot make, c x cores / ranks
    (its ranks make at most ranks / cores: the rest is load from elsewhere). The job's own
    sharing is not a stretch of its long keys that the count measures: on 4 ranks of 2 cores
    (the tenth collection, 2026-12-06 17:53) every run counted 1.4-2.0, while a key's events
    took 1.15x (keys over 1 ms) to 1.9x (under 30 us) its events on one process of 4 devices
    at 1.00 (the opposite of preemption, which stretches longer keys more), and 0.85x as
    long with three other ranks working beside them as with none (keys timed both ways): a
    working rank's events are slowed alike in every strategy, by the waiting ranks' wake-ups
    as by the working ranks, and strategy/cores.py prices the sharing per rank. Deflated by
    c, long keys were priced at 0.5-0.9 of their events, differently by fold (the same keys
    1.3-1.7x apart), and the held-out 4-rank cases 24% / 10% too fast (median by fold;
    now 12% / 0.4%: docs/simulator.md)."""
    if cores is None or ranks <= cores:
        return c
    return max(1.0, c * cores / ranks)


def deflate(per_run: list, profile: Profile, base: Profile | None, slice_s: float) -> float:
    """deflate_long_keys on [({cost key: [event seconds]}, the run's load) per run]."""
    work: dict = {}
    short: dict = {}                # key -> its events in the runs where it is short
    for durations, c in per_run:
        limit = slice_s / (4 * (c - 1)) if c > 1 and slice_s > 0 else math.inf
        long = {key: ts for key, ts in durations.items()
                if profile.get(key, "cpu").seconds >= limit}
        typical = {key: profile.get(key, "cpu").seconds for key in long}
        for key, w in pooled_work(long, c, typical, slice_s).items():
            work.setdefault(key, []).extend([w] * len(long[key]))
        for key, ts in durations.items():
            if key not in long:
                short.setdefault(key, []).extend(ts)
    for key, ws in work.items():
        # the runs where the key is short beside a slice timed its work too: their events'
        # median, weighted by their events (one run at a load of 1.14 is not the only word
        # on a key 179 other events timed at a load of 1.00)
        rest = short.get(key, [])
        if rest:
            ws = ws + [statistics.median(rest)] * len(rest)
        m = profile.get(key, "cpu")
        profile.add(key, "cpu", Measurement(statistics.fmean(ws), m.repeats, m.min_s, m.max_s))
    load = statistics.median(c for _, c in per_run)
    if base is not None:
        seen = {key for durations, _ in per_run for key in durations}
        price_unseen_by_work(profile, base, seen, load, slice_s)
        price_unseen_long_keys(profile, base, set(work), seen, load, slice_s)
        price_unseen_by_operator(profile, base, seen,
                                 slice_s / (load - 1) if load > 1 and slice_s > 0 else math.inf)
    return load


def _size(work) -> float:
    """What a part's time grows with: its FLOPs, or for a part without (elementwise
    operators: the work Counter counts none) the bytes of its tensors; 0 when unknown."""
    if work is None:
        return 0.0
    return float(work.flops) if work.flops > 0 else float(work.bytes)


def price_unseen_by_operator(profile: Profile, base: Profile, seen: set,
                             short: float = math.inf) -> int:
    """Bound, in `profile`, the price of each key of `base` no run timed by what the runs
    timed of the same operator (same parameters, same phase) at other shapes: the in-situ
    work per FLOP (bytes for elementwise operators; costs/work.py) of the nearest timed
    shape, or the line work = a + b x FLOPs through three or more of them; the key keeps
    the lower of that and its price from the profiler's time alone. The profiler's time of
    a shape can be far from its in-situ work when nothing preempted it: AlexNet's first
    convolution's backward at batch 16 took 7.1-7.3 ms in all 5 repeats alone and 2.8 ms
    a node in situ, where the batch-8 shape took 2.8 ms alone and 1.8 ms in situ, at the
    same in-situ 0.04 ns per FLOP.
    Where the operator's timed shapes count FLOPs, the bound is never below what they give
    in FLOPs and bytes together (flops_and_bytes): a shape that moves more bytes per FLOP
    than the timed ones takes longer than its FLOPs say (AlexNet's first convolution with 2
    output channels a device, parameter parallel on 1 x 4: 2.3-2.4 ms a node in situ, 2.6
    ms alone, its im2col reading the whole 6.2 MB input for a quarter of the FLOPs of the
    timed 8-channel shapes; bounded by FLOPs at 0.78-0.86 ms). Where they cannot tell
    bytes from FLOPs, a shape moving more bytes per FLOP than any of them is not bounded
    (beyond_timed_bytes). A key of an operator without FLOPs (sized by its bytes) short in
    the profiler (its fastest repeat below `short`: unpreempted, deflate's slice / (load -
    1)) is bounded too by its time alone times its operator's in-situ work over time alone
    at the timed shape nearest in time alone (by_alone_ratio): the profiler's time sees
    what bytes do not, the part's layout. The Transformer's layer norm statistics with half
    the features a device (attribute parallel: a strided part) took 27 us alone and 80 us
    in situ, 1.3 us and 6 us with all of them; by bytes the nearest of the two priced a 16
    x 8 x 32 part (1.3 us alone, 5.3 us in situ in its own runs) at 75 us, left at 28 us by
    the line of all operators. (Operators with FLOPs keep their bounds: bounded by time
    alone too, on acc-1206b AlexNet attribute parallel on 2 ranks went from -17% to -23%
    and the Transformer's random1 on 1 x 4 from -23% to -26%.) Returns how many keys it
    lowered."""
    groups: dict = {}
    alone: dict = {}                           # operator -> [(time alone, work)], short ones
    for key in sorted(seen, key=repr):         # the same points in every process
        w = base.work.get(key) or profile.work.get(key)
        x = _size(w)
        m = profile.get(key, "cpu")
        if x > 0 and m is not None:
            groups.setdefault(key[0], []).append((x, m.seconds, w.flops, w.bytes))
        t = alone_s(base, key)
        if m is not None and t is not None and 0 < t < short:
            alone.setdefault(key[0], []).append((t, m.seconds))
    two_term = {op: flops_and_bytes(points) for op, points in groups.items()}
    lowered = 0
    for key in base.keys("cpu"):
        if key in seen or key[0] not in groups:
            continue
        w = base.work.get(key)
        x = _size(w)
        m = profile.get(key, "cpu")
        if x <= 0 or m is None:
            continue
        points = groups[key[0]]
        if len({p[0] for p in points}) >= 3:
            a, b = _line([p[0] for p in points], [p[1] for p in points])
            bound = a + b * x
        else:
            px, pw, _, _ = min(points, key=lambda p: abs(math.log(p[0] / x)))
            bound = pw * x / px
        if w.flops > 0 and two_term[key[0]] is not None:
            a, b, c = two_term[key[0]]
            bound = max(bound, a + b * w.flops + c * w.bytes)
        if w.flops > 0 and beyond_timed_bytes(w, points, two_term[key[0]]):
            continue
        t = alone_s(base, key)
        if w.flops <= 0 and key[0] in alone and t is not None and 0 < t < short:
            bound = min(bound, by_alone_ratio(t, alone[key[0]]))
        if 0 < bound < m.seconds:
            r = bound / m.seconds
            profile.add(key, "cpu", Measurement(bound, m.repeats, m.min_s * r, m.max_s * r))
            lowered += 1
    return lowered


def by_alone_ratio(t: float, timed: list) -> float:
    """A shape's work from its time alone `t`: t times the in-situ work over the time alone
    of the operator's timed shape nearest to it in time alone (`timed`: (time alone, work)
    each, times > 0)."""
    ta, wa = min(timed, key=lambda p: (abs(math.log(p[0] / t)), p))
    return t * wa / ta


# How far beyond its operator's timed shapes' bytes per FLOP a shape's is before their FLOPs
# no longer bound it (beyond_timed_bytes).
BEYOND_TIMED_BYTES = 2.0


def beyond_timed_bytes(work, points, two_term) -> bool:
    """Whether a shape moves more than BEYOND_TIMED_BYTES times the bytes per FLOP of any of
    its operator's timed shapes (`points`: (size, work, FLOPs, bytes) each) while their
    line prices no bytes
    (`two_term` None, or its per-byte term 0): then the timed shapes say nothing about the
    shape's copies, and a bound from their FLOPs is an extrapolation. AlexNet's first
    convolution with a quarter of its output channels a device (parameter parallel on 4
    ranks: 45 MFLOP, 6.4 MB, 0.14 bytes a FLOP where the timed shapes moved 0.04-0.05, too
    alike for the line to tell bytes from FLOPs) was bounded at 0.85-1.04 ms of work; its
    fastest repeat alone took 2.0-2.6 ms, its events in situ 2.5-3.3 ms."""
    timed = [b / f for _, _, f, b in points if f > 0]
    if not timed or work.bytes / work.flops <= BEYOND_TIMED_BYTES * max(timed):
        return False
    return two_term is None or two_term[2] <= 0


def flops_and_bytes(points) -> tuple | None:
    """(a, b, c) >= 0 of the line work = a + b x FLOPs + c x bytes through an operator's
    timed shapes (`points`: (size, work, FLOPs, bytes) each), fitted to their relative
    errors (least squares on work / y: a 50 us shape counts as much as a 3 ms one); None
    with fewer than 3 shapes of different (FLOPs, bytes) that count FLOPs. A convolution's
    time is its multiply-adds plus the im2col copies of its input, which grow with the
    input's bytes, not with the FLOPs."""
    rows = [(1.0, float(f), float(b), y) for _, y, f, b in points if f > 0 and y > 0]
    if len({(f, b) for _, f, b, _ in rows}) < 3:
        return None
    x = np.array([r[:3] for r in rows]) / np.array([r[3] for r in rows])[:, None]
    scale = x.max(axis=0)                   # columns of one magnitude for lstsq
    scale[scale <= 0] = 1.0                 # (no shape moved bytes: its column is 0)
    x = x / scale
    ones = np.ones(len(rows))
    best, coef = math.inf, np.zeros(3)
    for used in ((0, 1, 2), (0, 1), (0, 2), (1, 2), (0,), (1,), (2,)):
        c, *_ = np.linalg.lstsq(x[:, used], ones, rcond=None)
        if (c < 0).any():
            continue
        full = np.zeros(3)
        full[list(used)] = c
        err = float(((x @ full - ones) ** 2).sum())
        if err < best:
            best, coef = err, full
    coef = coef / scale
    return float(coef[0]), float(coef[1]), float(coef[2])


def pooled_work(durations: dict, c: float, typical: dict, slice_s: float) -> dict:
    """{key: work} of the long keys of one run ({key: [event seconds]}) at its contention c:
    each key's mean of its events / c, with every event capped at what a stretched event
    of the key takes (c x its typical time, `typical`: insitu_times' median without the
    preempted events) plus two slices, and the time cut off by the caps shared by all the
    long keys of the run in proportion to their capped events. Which key a long wait lands
    on is chance (one 30 ms wait among the 36 events of an RNNLM LSTM step of 130 us priced
    the step at 468 us by its mean, 130 us in the other fold; a key with 2 events, 32 us,
    at 986 us by their median); its expected cost is in proportion to the work, and the
    total is kept."""
    capped = {k: [min(t, c * typical[k] + 2 * slice_s) for t in ts]
              for k, ts in durations.items()}
    kept = sum(map(sum, capped.values()))
    share = sum(map(sum, durations.values())) / kept if kept > 0 else 1.0
    return {k: statistics.fmean(ts) * share / c for k, ts in capped.items()}


def price_unseen_by_work(profile: Profile, base: Profile, seen: set, load: float,
                         slice_s: float) -> tuple | None:
    """Price, in `profile`, the keys of `base` no run timed by the line work = a + f x
    alone fitted (Theil-Sen, one point per key) to the timed keys' work in `profile` against
    their time alone (alone_s), over the keys short in the profiler (their fastest repeat
    unpreempted: below a slice / (load - 1)) when at least 3 differ; returns (a, f) or None.
    The line insitu_times fits is to the events, so its slope holds the runs' contention
    (in-situ = 1.6 us + 3.2 x alone on 2 ranks at a load of 2); priced by it, a strategy
    never run paid the contention twice (RNNLM operation parallel on 2 ranks: 9.6 ms of work
    from the other fold, 5.2 ms from its own traces, 6.6 ms of CPU per rank)."""
    long_alone = slice_s / (load - 1) if load > 1 and slice_s > 0 else math.inf
    points = [(alone_s(base, k), profile.get(k, "cpu").seconds) for k in seen
              if alone_s(base, k) is not None]
    short = [(x, y) for x, y in points if x < long_alone]
    points = short if len({x for x, _ in short}) >= 3 else points
    if len({x for x, _ in points}) < 3:
        return None
    a, f = _line(*zip(*points), most=2000)
    for key in base.keys("cpu"):
        if key not in seen:
            m, x = base.get(key, "cpu"), alone_s(base, key)
            profile.add(key, "cpu", Measurement(a + f * x, m.repeats, a + f * m.min_s,
                                                a + f * m.max_s))
    return a, f


def price_unseen_long_keys(profile: Profile, base: Profile, timed_long: set, seen: set,
                           load: float, slice_s: float) -> int:
    """Price, in `profile`, the keys of `base` no run timed whose every repeat in the
    profiler was preempted (alone_s at least a slice / (load - 1): one slice expected per
    repeat) at alone_s times the median ratio of work to alone_s of the `timed_long` keys
    as long in the profiler (or 1 / load without such keys); returns how many."""
    long_alone = slice_s / (load - 1) if load > 1 and slice_s > 0 else math.inf
    if long_alone == math.inf:
        return 0
    ratios = [profile.get(k, "cpu").seconds / alone_s(base, k) for k in timed_long
              if (alone_s(base, k) or 0) >= long_alone]
    ratio = statistics.median(ratios) if ratios else 1.0 / load
    priced = 0
    for key in base.keys("cpu"):
        if key not in seen and alone_s(base, key) >= long_alone:
            m = base.get(key, "cpu")
            profile.add(key, "cpu", Measurement(ratio * alone_s(base, key), m.repeats,
                                                ratio * m.min_s, ratio * m.max_s))
            priced += 1
    return priced


def rank_speeds(runs, profile: Profile) -> list[tuple]:
    """How fast each rank ran in a recorded iteration, beside its other ranks: one tuple per
    run of several ranks, each rank's task events' total over what they take at the
    profile's prices, divided by that ratio over all the run's ranks (the iteration's
    shared speed is the contention's and the iteration factor's to hold), ranks without
    tasks left out. On 2 ranks at a load of 1.00 the ranks of one iteration ran the same
    tasks up to 1.5x apart (RNNLM data parallel: 6.7 and 10.4 ms), and coupled ranks wait
    for the slower (preemption.expected_makespan draws these)."""
    out = []
    for r in runs:
        if r.ranks < 2:
            continue
        per: dict = {}
        for e in r.events:
            if e.get("ph") == "X" and "node" in (e.get("args") or {}):
                node = r.graph.nodes[int(e["args"]["node"])]
                if node.kind is TASK:
                    spent = per.setdefault(e.get("pid", 0), [0.0, 0.0])
                    spent[0] += e["dur"] / 1e6
                    spent[1] += profile.get(node.cost_key, "cpu").seconds * \
                        (getattr(r, "task_scale", None) or {}).get(node.id, 1.0)
        per = {rank: (a, p) for rank, (a, p) in per.items() if a > 0 and p > 0}
        if len(per) < 2:
            continue
        shared = sum(a for a, _ in per.values()) / sum(p for _, p in per.values())
        out.append(tuple(sorted(a / p / shared for a, p in per.values())))
    return out


def slice_length(durations: dict, profile: Profile) -> float:
    """The OS's time slice as the runs felt it: the median of what the preempted task events
    (more than PREEMPTED times their key's time) took beyond it; 0 when none was."""
    extra = [t - profile.get(k, "cpu").seconds for k, ts in durations.items() for t in ts
             if t > PREEMPTED * profile.get(k, "cpu").seconds]
    return statistics.median(extra) if extra else 0.0
