"""The accuracy benchmark's rows on choosing a strategy by a calibration: the searched
strategy against data parallelism as each fold's calibration predicts them, as a search
judged by a calibration keeps one of them (apps/judge.py: strategy.heldout.kept with the
calibration's held-out margin), and each calibration's own held-out estimate
(strategy/heldout.py) beside the error it then showed on the other fold's strategies."""
from __future__ import annotations

import statistics


def searched_vs_data(cases: list[dict], key: str = "predicted_s") -> list[str]:
    """Per app and layout, 'app layout: predicted 0.91x, measured 0.95x' (searched over data
    parallel), with 'HELD' or 'NOT HELD' when the prediction says searched is faster."""
    by = {(c["app"], c["layout"], c["strategy"]): c for c in cases}
    out = []
    for (a, lay, s), c in by.items():
        d = by.get((a, lay, "data"))
        if s != "searched" or d is None:
            continue
        p, m = c[key] / d[key], c["measured_s"] / d["measured_s"]
        verdict = "" if p >= 1 else (" HELD" if m < 1 else " NOT HELD")
        out.append(f"{a} {lay}: predicted {p:.2f}x, measured {m:.2f}x{verdict}")
    return out


def _judged(pairs: list, margin_key: str) -> tuple:
    """(kept searched, not slower, within the spread, texts) of (searched, data) cases
    judged with the margin c[margin_key]."""
    from strategy.heldout import kept
    kept_searched, not_slower, within, out = 0, 0, 0, []
    for c, d in pairs:
        times = sorted([(c["predicted_s"], "searched"), (c["judged_data_s"], "data")])
        keep = kept(times, c.get(margin_key) or 0.0, "data") == "searched"
        m = c["measured_s"] / d["measured_s"] if keep else 1.0
        kept_searched += keep
        not_slower += m <= 1.0
        within += m <= 1.0 or d["measured_s"] >= c["spread_s"][0]
        out.append(f"{c['app']} {c['layout']}: {c['predicted_s'] / c['judged_data_s']:.2f}x "
                   f"predicted, margin {100 * (c.get(margin_key) or 0.0):.1f}%, kept "
                   f"{'searched' if keep else 'data parallel'}, measured {m:.2f}x")
    return kept_searched, not_slower, within, out


def judged_rows(cases: list[dict]) -> list[tuple]:
    """The searched strategy as a search with a calibration returns it (apps/judge.py): the
    calibration of the fold holding data parallelism (in its runs, as a user who recorded it)
    predicts both, the faster kept unless by less than its margin (`judged_error`: its
    held-out estimate, else its in-sample error); beside it the same with the in-sample
    error (`judged_in_sample`) as the margin, as before 2026-12-07."""
    by = {(c["app"], c["layout"], c["strategy"]): c for c in cases}
    pairs = [(c, by[a, lay, "data"]) for (a, lay, s), c in by.items()
             if s == "searched" and (a, lay, "data") in by and c.get("judged_data_s") is not None]
    if not pairs:
        return []
    kept_searched, not_slower, within, out = _judged(pairs, "judged_error")
    n = len(pairs)
    fallback = sum(1 for c, _ in pairs if c.get("judged_margin") == "in-sample")
    before = ""
    if any("judged_in_sample" in c for c, _ in pairs):
        k0, ns0, w0, _ = _judged(pairs, "judged_in_sample")
        before = (f"; with the in-sample error as the margin (before 2026-12-07): {ns0} of "
                  f"{n} not slower, kept the searched in {k0}, within the spread {w0}")
    return [("searched strategy judged by the calibration against data parallel: kept "
             "not slower when run", f"{not_slower} of {n}",
             f"kept the searched in {kept_searched}; one calibration (the fold with data "
             "parallel's runs) predicts both, as --search on a calibrated machine does "
             "(apps/judge.py: the searched one kept only when predicted faster by more than "
             "the calibration's held-out error, estimated inside it: strategy/heldout.py"
             + (f"; in {fallback} its in-sample error, no estimate" if fallback else "")
             + f"{before}); kept / data parallel iteration time (medians; not slower within "
             "the runs' spread, data parallel's median at or above the kept one's fastest "
             f"run: {within} of {n}): " + "; ".join(out))]


def heldout_rows(estimates: dict, cases: list[dict], layout_text) -> list[tuple]:
    """Each calibration's held-out estimate ({"LAYOUT, fold K": {"error", "in_sample",
    "folds", "graphs"}}) beside the median error of the other fold's cases it predicted."""
    have = {k: e for k, e in estimates.items() if e.get("error") is not None}
    if not have:
        return []
    parts, under = [], 0
    for key, e in have.items():
        layout, fold = key.split(", fold ")
        errs = [abs(c["error"]) for c in cases if c["layout"] == layout
                and c.get("fold") == int(fold)]
        if not errs:
            continue
        actual = statistics.median(errs)
        under += e["error"] < actual
        parts.append(f"{layout_text(layout)} fold {fold}: {100 * e['error']:.1f}% "
                     f"(in-sample {100 * e['in_sample']:.1f}%; {e['folds']}-fold over "
                     f"{e['graphs']}) vs {100 * actual:.1f}% on the other fold")
    ratios = [e["error"] / e["in_sample"] for e in have.values() if e["in_sample"] > 0]
    return [("held-out error estimated inside each calibration vs its error on the other "
             "fold's strategies: median", f"below in {under} of {len(parts)}",
             "strategy/heldout.py: each calibration refitted without a third of its "
             "strategies, each predicted by the refit not holding it; the estimate over the "
             "in-sample error (residuals) " + (f"{statistics.median(ratios):.2f}x (median); "
                                                if ratios else "; ") + "; ".join(parts))]
