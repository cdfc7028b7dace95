"""What a search returns: per candidate chain a CandidateRun, and the SearchResult (best
strategy, baselines, history, its text and dict forms, and where it differs from data
parallelism). The search itself is strategy/search.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .explain import Comparison, compare


@dataclass
class CandidateRun:
    name: str
    start: float                 # predicted time of the starting strategy
    best: float
    proposals: int = 0
    accepted: int = 0
    improved: int = 0
    seconds: float = 0.0
    stopped_by: str = ""         # "budget", "no improvement", "proposals"
    failed: int = 0              # proposals the runtime could not plan (see errors)
    known: int = 0               # proposals of strategies simulated before, rejected
    #                              without a simulation (see "Known strategies")
    over_bytes: int = 0          # where it ended out of memory: most bytes over a device


@dataclass
class SearchResult:
    configs: dict                # operator name -> ParallelConfig of the best strategy
    predicted: float             # its simulated iteration time, seconds
    baselines: dict              # "data_parallel", "expert" -> predicted seconds
    candidates: list[CandidateRun]
    proposals: int
    seconds: float
    seed: int
    beta: float                  # 1 / seconds of cost
    history: list = field(default_factory=list)   # (elapsed s, proposals, best s, CPU s)
    errors: list = field(default_factory=list)    # first few unplannable proposals
    breakdowns: dict = field(default_factory=dict)  # "data_parallel", "best" -> Breakdown
    baseline_configs: dict = field(default_factory=dict)   # data parallelism's configs
    recompute: str | None = None   # the best strategy's recomputation: a plan's name, or
    #                                which segments are on (moves.RecomputeUnits.name)
    recompute_segments: list = field(default_factory=list)  # ... and its segments
    peak_memory: dict = field(default_factory=dict)   # device -> bytes, best strategy
    skipped: list = field(default_factory=list)   # builds not started: no time left for them
    simulated: int = 0           # proposals simulated (the others were known strategies)
    cpu_seconds: float = 0.0     # the search's process CPU time (seconds is wall time)

    def explain(self, model) -> Comparison:
        """Where the best strategy's iteration differs from data parallelism's (from the
        simulations the search already ran: nothing is built again)."""
        return compare(model, self.baseline_configs, self.breakdowns["data_parallel"],
                       self.configs, self.breakdowns["best"], "data parallel", "searched")

    def speedup(self, baseline: str = "data_parallel") -> float:
        """How many times faster than a baseline the best strategy is predicted to be."""
        base = self.baselines.get(baseline)
        if base is None or not math.isfinite(self.predicted) or self.predicted <= 0:
            return float("nan")
        return base / self.predicted

    @property
    def proposals_per_second(self) -> float:
        return self.proposals / self.seconds if self.seconds > 0 else 0.0

    def text(self) -> str:
        """The search's summary: baselines, best, candidates."""
        lines = [f"searched {self.proposals} proposals in {self.seconds:.1f} s "
                 f"({self.proposals_per_second:.1f}/s, seed {self.seed}; "
                 f"{self.simulated} simulated, the others known)"]
        for name, t in self.baselines.items():
            lines.append(f"  {name.replace('_', ' '):<14} {_ms(t)}")
        lines.append(f"  {'best found':<14} {_ms(self.predicted)}  ("
                     + ", ".join(f"{self.speedup(k):.2f}x vs {k.replace('_', ' ')}"
                                 for k in self.baselines) + ")"
                     + (f", recomputation: {self.recompute}" if self.recompute else ""))
        if self.peak_memory:
            lines.append(f"  {'peak memory':<14} {max(self.peak_memory.values()) / 1e9:.2f} GB "
                         "on the fullest device")
        width = max([13] + [len(c.name) for c in self.candidates])
        for c in self.candidates:
            lines.append(f"    from {c.name:<{width}} {_ms(c.start)} -> {_ms(c.best)}: "
                         f"{c.proposals} proposals, {c.accepted} accepted, {c.improved} "
                         f"improved, {c.seconds:.1f} s, stopped by {c.stopped_by}"
                         + (f", {c.failed} unplannable" if c.failed else "")
                         + (f", {c.known} known" if c.known else "")
                         + (f", ended {c.over_bytes / 1e9:.3g} GB over a device's memory"
                            if c.over_bytes else ""))
        lines += [f"  note: {e}" for e in self.errors]
        lines += [f"  skipped: {e}" for e in self.skipped]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"predicted_s": self.predicted, "baselines_s": dict(self.baselines),
                "speedup_vs": {k: self.speedup(k) for k in self.baselines},
                "proposals": self.proposals, "simulated": self.simulated,
                "seconds": self.seconds, "cpu_seconds": self.cpu_seconds,
                "proposals_per_s": self.proposals_per_second, "seed": self.seed,
                "beta_per_s": self.beta,
                "candidates": [vars(c) for c in self.candidates],
                "history": [list(h) for h in self.history], "recompute": self.recompute,
                "peak_memory_bytes": {str(d): b for d, b in self.peak_memory.items()},
                "skipped": list(self.skipped)}


def _ms(t: float) -> str:
    return f"{t * 1e3:.4g} ms" if math.isfinite(t) else "invalid (over memory)"
