"""CostModel: the time of a task node on a device spec, for the simulator.

    costs = CostModel(Profile.load("cpu.profile"))
    costs.prepare(graph, machine_model)        # optional: one warning for a whole graph
    t = costs.task_time(node, machine_model.device(node.device))
    print(costs.explain(node, spec))          # measured / analytic / calibrated, and why

Lookup is by (node.cost_key, spec.kind), so every device of one kind must have the same
spec. The first time a (node, kind) is asked, the answer comes from, in order:
  measured    the profile's median for (cost key, kind);
  calibrated  the analytic model with parameters fitted to this kind's measurements (given
              in `calibrations`, or fitted on first need from the profile when it holds at
              least analytic.MIN_POINTS measurements of the kind);
  analytic    the analytic model with default efficiencies.
Then it is cached per (cost key, kind). Nothing is cached per node object: a CostModel
lives as long as a search, or a benchmark's many searches, and a node kept as a cache key
keeps its launch and regions alive (a per-node cache of up to 1M entries grew a process by
~1 GB a search_quality cell, to the OOM killer); the simulator asks once per node or per task
class (taskgroups.py) and keeps what it needs with the graph it times.

Missing measurements never abort: they fall back to the analytic model and one warning per
process (CostWarning) says how many keys were missing (`prepare` counts a whole graph
first; `missing` lists them).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

from taskrt.taskgraph import TASK

from .analytic import (MIN_POINTS, Calibration, CalibrationError, analytic_time, calibrate,
                       default_calibration, key_dtype, spec_numbers, terms)
from .profile import Profile, Work
from .work import UncountableOnMeta, node_bytes, node_work


class CostWarning(UserWarning):
    """Some task costs come from the analytic model because nobody measured them."""


_warned = False          # one missing-cost warning per process


def reset_warning() -> None:
    """Allow the missing-cost warning again (tests)."""
    global _warned
    _warned = False


@dataclass(frozen=True)
class Explanation:
    source: str              # "measured", "calibrated" or "analytic"
    seconds: float
    detail: str

    def __str__(self) -> str:
        return f"{self.seconds * 1e3:.4g} ms ({self.source}: {self.detail})"


class CostModel:
    def __init__(self, profile: Profile | None = None,
                 calibrations: dict[str, Calibration] | None = None,
                 auto_calibrate: bool = True, int_ranges=None):
        self.profile = profile if profile is not None else Profile()
        self.calibrations: dict[str, Calibration] = dict(calibrations or {})
        self.auto_calibrate = auto_calibrate
        self.int_ranges = int_ranges
        self._times: dict = {}          # (cost key, kind) -> seconds
        self._sources: dict = {}        # (cost key, kind) -> "measured" | ...
        self._work: dict = dict(self.profile.work)   # cost key -> Work
        self.missing: dict = {}         # (cost key, kind) -> a node with that key
        self._quiet = 0

    # -- the simulator's interface ------------------------------------------------------------
    def task_time(self, node, spec) -> float:
        """Seconds `node` (a TaskNode) takes on a device described by `spec`."""
        return self._key_time(node, spec)

    def prepare(self, graph, machine_model) -> None:
        """Cost every task node of `graph` on its device, warning once with the full count
        of unmeasured keys (otherwise the warning comes at the first miss)."""
        before = len(self.missing)
        self._quiet += 1
        try:
            for n in graph.nodes:
                if n.kind is TASK:
                    self.task_time(n, machine_model.device(n.device))
        finally:
            self._quiet -= 1
        if len(self.missing) > before:
            self._warn()

    # -- lookups -------------------------------------------------------------------------------
    def _key_time(self, node, spec) -> float:
        key = node.cost_key
        kind = spec.kind
        t = self._times.get((key, kind))
        if t is not None:
            return t
        m = self.profile.get(key, kind)
        if m is not None:
            t, source = m.seconds, "measured"
        else:
            cal = self.calibration(spec)
            t = self._analytic(node, key, spec, cal)
            source = "calibrated" if cal.calibrated else "analytic"
            self.missing[key, kind] = node
            if not self._quiet:
                self._warn()
        self._times[key, kind] = t
        self._sources[key, kind] = source
        return t

    def work(self, node) -> Work:
        """FLOPs and bytes of the node's cost key (counted once, on meta tensors)."""
        key = node.cost_key
        w = self._work.get(key)
        if w is None:
            try:
                w = node_work(node, None, self.int_ranges)
            except UncountableOnMeta as e:
                warnings.warn(str(e), CostWarning, stacklevel=2)
                w = Work(0.0, node_bytes(node))
            except Exception:         # an uncountable part is costed by its bytes alone
                w = Work(0.0, node_bytes(node))
            self._work[key] = w
        return w

    def calibration(self, spec) -> Calibration:
        """The analytic model's parameters for spec.kind (fitted, or defaults)."""
        cal = self.calibrations.get(spec.kind)
        if cal is None:
            cal = default_calibration(spec)
            if self.auto_calibrate and len(self.profile.keys(spec.kind)) >= MIN_POINTS:
                try:
                    cal = calibrate(self.profile, spec)
                except CalibrationError:
                    pass
            self.calibrations[spec.kind] = cal
        return cal

    def _analytic(self, node, key, spec, cal) -> float:
        peak, bw, _ = spec_numbers(spec, key_dtype(key))
        return analytic_time(self.work(node), peak, bw, cal)

    def _warn(self) -> None:
        global _warned
        if _warned or not self.missing:
            return
        _warned = True
        kinds = sorted({k for _, k in self.missing})
        (key, kind), node = next(iter(self.missing.items()))
        warnings.warn(
            f"cost model: {len(self.missing)} cost key(s) have no measurement on "
            f"{', '.join(kinds)} (first: {node.launch.name} on {kind}); their times come "
            "from the analytic model. Profile them on that device (python -m strategy.costs "
            "profile APP) for measured times; CostModel.missing lists them. This warning is "
            "shown once per process.", CostWarning, stacklevel=3)

    def explain(self, node, spec) -> Explanation:
        """Where task_time(node, spec) comes from, with the numbers behind it."""
        t = self.task_time(node, spec)
        key = node.cost_key
        source = self._sources[key, spec.kind]
        if source == "measured":
            m = self.profile.get(key, spec.kind)
            detail = (f"{node.launch.name} on {spec.kind}, median of {m.repeats} runs "
                      f"(min {m.min_s * 1e3:.4g} ms, max {m.max_s * 1e3:.4g} ms)")
            return Explanation(source, t, detail)
        cal = self.calibration(spec)
        w = self.work(node)
        peak, bw, _ = spec_numbers(spec, key_dtype(key))
        fixed, c, mem = terms(w, peak, bw, cal)
        detail = (f"{node.launch.name} on {spec.kind}: {w}; overheads {fixed * 1e6:.3g} us + "
                  f"max(compute {c * 1e3:.4g} ms, memory {mem * 1e3:.4g} ms); {cal}")
        return Explanation(source, t, detail)

    def summary(self) -> str:
        counts: dict = {}
        for (_, kind), s in self._sources.items():
            counts.setdefault(kind, {}).setdefault(s, 0)
            counts[kind][s] += 1
        parts = [f"{kind}: " + ", ".join(f"{n} {s}" for s, n in sorted(c.items()))
                 for kind, c in sorted(counts.items())]
        return "cost keys used: " + ("; ".join(parts) or "none")
