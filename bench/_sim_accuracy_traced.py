"""The accuracy benchmark's row for what tracing costs: each case's traced iterations (the
span of every rank's events, on one clock: strategy.calibration.load_runs) over its timed
runs' period. A calibration fits traced iterations and predicts untraced ones, so this is the
part of an error the traces cannot show (the tracer's recording of every node, the updates an
untraced run batches; docs/simulator.md, 2026-12-05 10:00)."""
from __future__ import annotations

import statistics


def traced_span(paths) -> float | None:
    """The median over a case's traced runs of their traced iteration's span; None without
    traces."""
    from strategy.calibration import load_runs
    runs = load_runs(paths) if paths else []
    return statistics.median(r.measured_s for r in runs) if runs else None


def _ratios_text(ratios: list[float]) -> str:
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return f"{statistics.median(ratios):.2f}x ({q[0]:.2f}-{q[2]:.2f})"


def traced_rows(cases: list[dict], layout_text) -> list[tuple]:
    """The row: median (quartiles) of traced span / measured over the cases with both, per
    layout and per app of each layout; none when no case has a traced span."""
    have = [c for c in cases if c.get("traced_span_s") and c["measured_s"] > 0]
    if not have:
        return []
    ratio = {id(c): c["traced_span_s"] / c["measured_s"] for c in have}
    per = []
    for layout in sorted({c["layout"] for c in have}):
        cs = [c for c in have if c["layout"] == layout]
        apps = ", ".join(f"{a} {statistics.median(ratio[id(c)] for c in cs if c['app'] == a):.2f}"
                         for a in sorted({c["app"] for c in cs}))
        per.append(f"{layout_text(layout)} {_ratios_text([ratio[id(c)] for c in cs])}: {apps}")
    rows = [("traced iteration over the timed period: median (quartiles)",
             _ratios_text(list(ratio.values())),
             f"{len(have)} held-out cases: the median span of each case's own traced "
             "iterations (every rank's events, one clock) over its measured period. The "
             "calibrations fit traced iterations and predict untraced ones: above 1 is what "
             "tracing costs (its recording of every node, the updates an untraced run "
             "batches), which they charge to every prediction. Per layout (per app "
             "medians): " + "; ".join(per))]
    own = [c for c in have if c.get("traced_periods_s") and all(c["traced_periods_s"])]
    if own:                 # the traced runs' own untraced iterations, before the traced one
        mine = {id(c): c["traced_span_s"] / statistics.median(c["traced_periods_s"])
                for c in own}
        per = [f"{layout_text(layout)} "
               f"{_ratios_text([mine[id(c)] for c in own if c['layout'] == layout])}"
               for layout in sorted({c["layout"] for c in own})]
        rows.append(("traced iteration over its own run's untraced period",
                     _ratios_text(list(mine.values())),
                     f"{len(own)} held-out cases: each traced run times untraced iterations "
                     "before its traced one, at the same moment (their period is what its "
                     "trace keeps and the calibration fits the iteration factor to): the "
                     "median span over the median of those periods. Per layout: "
                     + "; ".join(per)))
    return rows
