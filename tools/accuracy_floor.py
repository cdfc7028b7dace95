"""How far two measurements of the same strategies agree: the floor under the simulator's
accuracy targets on this machine (issue 21; docs/simulator.md "How reproducible the
measurements are").

    python tools/accuracy_floor.py COLLECTION_A COLLECTION_B [--json]

A collection is a folder `python -m bench sim_accuracy` filled (SIM_ACCURACY_DATA=FOLDER):
its measured.json holds per layout (1x2: one process, two devices; 2x1: two ranks; ...) and
case (app, strategy) the measured iteration time, the median of the timed runs' periods, and
d2/ d4/ hold the strategy files the runs used. Two collections of the same code measure the
same strategies at different moments; the machine's speed moves between them (a 2-core
machine shared with other work), so the comparison grants what no simulator is given: per
(layout, app) one speed level, the median over its strategies of B's time over A's. What is
left, |(B / A) / level - 1| per case, is how far a measurement of one strategy moves against
the others of its app between two collections: a prediction cannot be checked closer than
that. Cases whose strategy files differ between the collections (a search or a random draw
that came out otherwise) are left out and listed.

Also for the fastest of a case's timed periods instead of their median (a statistic some
benchmarks prefer, less moved by interference), as a comparison.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections import defaultdict

# (label, the statistic of a case's timed runs)
STATISTICS = (("median period (what sim_accuracy compares with)", "measured_s"),
              ("fastest period", "periods_s"))
MIN_STRATEGIES = 3          # a (layout, app) with fewer common cases has no level


class FloorError(ValueError):
    """A collection that cannot be read: the message names the file and what is wrong."""


def read_cases(folder: str) -> dict:
    """{(layout, app, strategy): case} of a collection's measured.json, checked."""
    path = os.path.join(folder, "measured.json")
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        raise FloorError(f"{path}: no such file: give a folder that `SIM_ACCURACY_DATA=FOLDER "
                         "python -m bench sim_accuracy` filled") from None
    except (OSError, ValueError) as e:
        raise FloorError(f"{path}: not readable JSON ({e})") from None
    measured = data.get("measured") if isinstance(data, dict) else None
    if not isinstance(measured, dict):
        raise FloorError(f"{path}: no 'measured' table of layouts (an unfinished collection "
                         "has only partial.json: finish it first)")
    out = {}
    for layout, table in measured.items():
        ranks, _, per = str(layout).partition("x")
        if not (ranks.isdigit() and per.isdigit()):
            raise FloorError(f"{path}: layout {layout!r} is not RANKSxDEVICES (e.g. '2x1')")
        cases = table.get("cases") if isinstance(table, dict) else None
        if not isinstance(cases, list):
            raise FloorError(f"{path}: layout {layout!r} has no list of 'cases'")
        for k, case in enumerate(cases):
            try:
                key = (layout, str(case["app"]), str(case["strategy"]))
                times = [float(case["measured_s"])] + [float(p) for p in case["periods_s"]]
            except (KeyError, TypeError, ValueError):
                raise FloorError(f"{path}: layout {layout!r} case {k} lacks app, strategy, "
                                 "measured_s or periods_s") from None
            if not all(t > 0 for t in times) or len(times) < 2:
                raise FloorError(f"{path}: layout {layout!r} case {key[1:]}: times must be "
                                 "positive and periods_s not empty")
            out[key] = case
    return out


def _strategy_file(folder: str, layout: str, app: str, strategy: str) -> bytes | None:
    ranks, per = (int(x) for x in layout.split("x"))
    path = os.path.join(folder, f"d{ranks * per}", f"{app}_{strategy}.json")
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _value(case: dict, field: str) -> float:
    return float(case[field]) if field == "measured_s" else min(map(float, case[field]))


def floor(folder_a: str, folder_b: str) -> dict:
    """Per statistic: overall, per layout and per case the deviations |(b/a) / level - 1|
    (module doc); and the cases left out (strategy files not the same, or missing)."""
    a, b = read_cases(folder_a), read_cases(folder_b)
    common, left_out = [], []
    for key in sorted(set(a) & set(b)):
        fa, fb = (_strategy_file(f, *key) for f in (folder_a, folder_b))
        (common if fa is not None and fa == fb else left_out).append(key)
    out = {"cases": len(common), "left_out": [list(k) for k in left_out]}
    for label, field in STATISTICS:
        groups = defaultdict(dict)
        for key in common:
            groups[key[:2]][key[2]] = _value(b[key], field) / _value(a[key], field)
        rows = []
        for (layout, app), ratios in sorted(groups.items()):
            if len(ratios) < MIN_STRATEGIES:
                continue
            level = statistics.median(ratios.values())
            rows += [(layout, app, s, r / level - 1) for s, r in sorted(ratios.items())]
        if not rows:
            raise FloorError(f"{folder_a} and {folder_b}: no layout and app with "
                             f"{MIN_STRATEGIES} strategies measured alike in both")
        per_layout = {}
        for layout in sorted({r[0] for r in rows}):
            devs = [abs(r[3]) for r in rows if r[0] == layout]
            per_layout[layout] = (statistics.median(devs), max(devs))
        devs = [abs(r[3]) for r in rows]
        out[label] = {"median": statistics.median(devs), "worst": max(devs),
                      "per_layout": per_layout,
                      "worst_cases": sorted(rows, key=lambda r: -abs(r[3]))[:5]}
    return out


def text(result: dict, folder_a: str, folder_b: str) -> str:
    lines = [f"{folder_b} against {folder_a}: {result['cases']} cases with the same strategy "
             "files, one speed level per layout and app removed"]
    for label, _ in STATISTICS:
        r = result[label]
        per = ", ".join(f"{k} {100 * m:.1f}% / {100 * w:.1f}%"
                        for k, (m, w) in r["per_layout"].items())
        worst = ", ".join(f"{lay} {app} {s} {100 * d:+.0f}%"
                          for lay, app, s, d in r["worst_cases"])
        lines.append(f"  {label}: median {100 * r['median']:.1f}%, worst {100 * r['worst']:.1f}%"
                     f" (per layout median / worst: {per}); largest: {worst}")
    if result["left_out"]:
        lines.append("  left out (strategy files differ or are missing): " +
                     ", ".join(" ".join(k) for k in result["left_out"]))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/accuracy_floor.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("collection_a")
    ap.add_argument("collection_b")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)
    try:
        result = floor(args.collection_a, args.collection_b)
    except FloorError as e:
        print(f"accuracy_floor: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=1) if args.json else
          text(result, args.collection_a, args.collection_b))
    return 0


if __name__ == "__main__":
    sys.exit(main())
