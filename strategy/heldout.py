"""A calibration's error on strategies it never saw, estimated from its own traces, and the
margin a search judged by the calibration keeps data parallelism within (apps/judge.py).

Fit.error is the median |predicted / measured - 1| of the residuals: the runs the
calibration was fitted to. On strategies it never saw it is off by more: in the eleventh
collection (bench/sim_accuracy.py, 2026-12-06) residuals 5.6% median, held out 10.8%, and
on 4 ranks AlexNet's searched strategy, judged 0.90x data parallel's time, ran 1.32x it.
So calibrate() estimates the held-out error itself, by k-fold cross-validation over the
graphs its traces ran (a strategy of an app; several runs of one graph are one, as in the
residuals): the graphs, in the order their first trace was given, dealt round robin into
FOLDS folds; each fold's graphs predicted (residuals(), as the in-sample rows) by the
whole calibrate() refitted on the other folds' traces alone, every part refitted (task
times, host costs, contention, sharing, wake-ups, ranks' speeds, the iteration factor);
the estimate is the median of their errors, the statistic of Fit.error. Folds rather than
leaving one graph out: a refit costs as much as a calibration (its iteration factor is
2 rounds of predicting every calibrating graph), and the benchmark's own check leaves
half of the strategies out, not one. Needs MIN_GRAPHS graphs: with two, each refit sees
one strategy, whose keys and factor say little of the other's.

kept() and margin(): the judge keeps data parallelism unless another strategy is
predicted faster by more than the held-out estimate, or, where the calibration has none
(fewer graphs; a file written before 2026-12-07), than its in-sample error, and says which.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

MIN_GRAPHS = 3      # graphs (strategies) a calibration needs for a held-out estimate
FOLDS = 3
RECORD = "heldout"  # in the calibration record's "prediction" (calibration.prediction_record)


@dataclass(frozen=True)
class HeldOut:
    """The held-out estimate of a calibration: `error` (None without one: `why`), over
    `graphs` graphs in `folds` folds; `rows` (case, measured s, predicted s by a refit
    without the case's traces), empty when read back from a file."""
    error: float | None
    graphs: int
    folds: int = 0
    rows: tuple = ()
    why: str = ""

    def text(self) -> list[str]:
        """Fit.text()'s lines for it."""
        if self.error is None:
            return [f"held-out error: none ({self.why})"]
        lines = [f"held-out estimate ({self.folds}-fold over its {self.graphs} strategies: "
                 "each predicted by the calibration refitted without its fold's traces):"]
        lines += residual_lines(self.rows)
        errs = [abs(p / m - 1) for _, m, p in self.rows]
        worst = f", worst {100 * max(errs):.1f}%" if errs else ""
        lines.append(f"  median |error| {100 * self.error:.1f}%{worst} (the judge's margin: "
                     "apps/judge.py)")
        return lines


def residual_lines(rows) -> list[str]:
    """A text line per (case name, measured s, predicted s) row, the names in a column as
    wide as the longest."""
    width = max((len(name) for name, _, _ in rows), default=0)
    return [f"  {name:<{width}}  measured {m * 1e3:8.2f} ms  predicted {p * 1e3:8.2f} ms  "
            f"{100 * (p - m) / m:+6.1f}%" for name, m, p in rows]


def case_name(app: str, argv, runs: int = 1) -> str:
    """A recorded case's name in a calibration's rows: the app, its strategy file's name
    (not its folder) and the flags that change its graph (not the run's own: output,
    trace, iteration counts), with the number of runs where more than one."""
    drop, drop_value = {"--small", "--quiet", "--json"}, {"--trace", "--iterations",
                                                          "--warmup"}
    words, skip = [app], False
    for k, a in enumerate(argv):
        if skip:
            skip = False
        elif a in drop_value:
            skip = True
        elif a not in drop:
            words.append(a.replace("\\", "/").rsplit("/", 1)[-1]
                         if k and argv[k - 1] == "--strategy" else a)
    return " ".join(words) + (f" ({runs} runs)" if runs > 1 else "")


def residual_error(rows) -> float:
    """The median |predicted / measured - 1| of residuals' (name, measured s, predicted s)
    rows: how far a calibration is off on the runs it was fitted to (0 with none)."""
    errs = [abs(p / m - 1) for _, m, p in rows if m > 0]
    return statistics.median(errs) if errs else 0.0


def estimate(groups: list, refit, rows_of, folds: int = FOLDS) -> HeldOut:
    """HeldOut of a calibration whose runs are `groups` (runs grouped by graph, in order):
    `refit(runs)` is the calibration fitted on those runs alone, `rows_of(fit, group)` its
    residual row of one group."""
    n = len(groups)
    if n < MIN_GRAPHS:
        return HeldOut(None, n, why=f"its traces ran {n} strateg{'y' if n == 1 else 'ies'}, "
                       f"{MIN_GRAPHS} needed")
    k = min(folds, n)
    rows: list = [None] * n
    for f in range(k):
        try:
            fit = refit([r for i, g in enumerate(groups) if i % k != f for r in g])
        except ValueError as e:          # CalibrationError: e.g. a part no fold's runs fit
            return HeldOut(None, n, why=f"the refit without fold {f + 1} of {k} failed: {e}")
        for i in range(f, n, k):
            rows[i] = rows_of(fit, groups[i])
    return HeldOut(residual_error(rows), n, k, tuple(rows))


def to_record(held: HeldOut | None) -> dict | None:
    """The plain-JSON record of a held-out estimate (None: calibrate(heldout=False))."""
    if held is None:
        return None
    return {"error": held.error, "graphs": held.graphs, "folds": held.folds, "why": held.why}


def from_record(rec: dict, key: str = RECORD) -> HeldOut | None:
    """The HeldOut of a calibration record (prediction_record), validated; None where the
    record predates the estimate (2026-12-07) or calibrate was told not to estimate.
    Raises ValueError naming the bad value."""
    if key not in rec:
        return None
    got = rec[key]
    if got is None:
        return None
    if not isinstance(got, dict):
        raise ValueError(f"{key} {got!r} is not a record of error, graphs, folds")
    error, graphs, folds = got.get("error"), got.get("graphs"), got.get("folds")
    if error is not None and (type(error) not in (int, float) or not 0.0 <= error < math.inf):
        raise ValueError(f"{key} error {error!r} is not a relative error >= 0")
    for name, v in (("graphs", graphs), ("folds", folds)):
        if type(v) is not int or v < 0:
            raise ValueError(f"{key} {name} {v!r} is not a count >= 0")
    if error is not None and not (graphs >= MIN_GRAPHS and 2 <= folds <= graphs):
        raise ValueError(f"{key} of {graphs} graphs in {folds} folds: an estimate needs "
                         f">= {MIN_GRAPHS} graphs in 2..graphs folds")
    why = got.get("why") or ""
    if not isinstance(why, str):
        raise ValueError(f"{key} why {why!r} is not text")
    return HeldOut(None if error is None else float(error), graphs, folds, why=why)


def margin(fit) -> tuple[float, str]:
    """(relative error, what it is) a search judged by the calibration `fit` keeps data
    parallelism within: its held-out estimate, else its error on its own runs."""
    held = fit.heldout
    if held is not None and held.error is not None:
        return held.error, (f"the calibration's error on strategies held out of its fit "
                            f"({held.error:.1%}, {held.folds}-fold over {held.graphs})")
    why = held.why if held is not None else ("its file predates the held-out estimate: "
                                             "calibrate again")
    return fit.error, (f"the calibration's error on its own runs ({fit.error:.1%}; no "
                       f"held-out estimate: {why})")


def kept(times: list, error: float, baseline: str) -> str:
    """The name a search judged by a calibration keeps, of `times` ([(predicted s, name)],
    fastest first: calibration.judged()): the fastest, unless `baseline` (data parallelism)
    is predicted within `error` of it (margin(): the calibration's held-out error). A gain
    the model cannot tell from its error does not move a user off the baseline: on 4 ranks
    of 2 cores a searched Transformer strategy predicted 0.99x data parallel's time ran
    1.36x it (2026-12-06)."""
    best_t, best = times[0]
    base = next((t for t, name in times if name == baseline), None)
    if base is None or best == baseline or base > best_t * (1 + error):
        return best
    return baseline
