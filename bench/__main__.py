"""Run every benchmark module in bench/, write bench/results.json and bench/results.md.

    python -m bench                   # all benchmarks
    python -m bench planner_scaling   # some of them, by module name
    python -m bench --quick           # small sizes (a smoke run; numbers are not meaningful)
    python -m bench --merge /tmp/x/results.json   # add entries of a run made elsewhere

Running some benchmarks by name updates their entries and keeps the others already in
results.json (a full run of the quick or normal kind replaces the file's content), so the
table always holds every benchmark's latest numbers.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import platform
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def benchmark_modules() -> list[str]:
    """Every module of this package except the harness itself and private helpers."""
    return sorted(m.name for m in pkgutil.iter_modules([HERE])
                  if not m.name.startswith("_") and not m.ispkg)


def machine_info() -> dict:
    import torch
    return {"python": platform.python_version(), "torch": torch.__version__,
            "platform": platform.platform(), "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads()}


def markdown(results: dict) -> str:
    lines = ["| benchmark | metric | value | notes |", "|---|---|---|---|"]
    for name, res in results.items():
        for metric, value, note in res["rows"]:
            lines.append(f"| {res['title']} | {metric} | {value} | {note} |")
    return "\n".join(lines) + "\n"


def _merge_previous(path: str, results: dict, quick: bool, partial: bool) -> dict:
    """`results` after the entries of an earlier run of the same kind (quick or not) that
    this run did not redo, in their old order; new ones last."""
    if not partial or not os.path.exists(path):
        return results
    try:
        with open(path) as f:
            old = json.load(f)
    except (OSError, ValueError):
        return results
    if old.get("quick") != quick or not isinstance(old.get("benchmarks"), dict):
        return results
    merged = {k: results.get(k, v) for k, v in old["benchmarks"].items()}
    merged.update({k: v for k, v in results.items() if k not in merged})
    return merged


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="benchmark modules to run (default: all)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke test")
    ap.add_argument("--out", default=HERE, help="directory for results.json / results.md")
    ap.add_argument("--merge", metavar="RESULTS_JSON", action="append", default=[],
                    help="also take the entries of another run's results.json (of the same "
                         "kind, quick or not), e.g. a long benchmark run on its own")
    args = ap.parse_args(argv)
    available = benchmark_modules()
    names = args.names or available
    unknown = [n for n in names if n not in available]
    if unknown:
        print(f"bench: unknown benchmark(s) {unknown}; available: {available}", file=sys.stderr)
        return 2
    machine = machine_info()            # before any benchmark changes torch's settings
    results = {}
    for path in args.merge:
        with open(path) as f:
            other = json.load(f)
        if other.get("quick") != args.quick:
            print(f"bench: {path} is a {'quick' if other.get('quick') else 'full'} run; "
                  f"this one is not", file=sys.stderr)
            return 2
        results.update(other["benchmarks"])
    if args.merge and not args.names:
        names = []
    for name in names:
        t0 = time.perf_counter()
        print(f"bench: running {name} ...", flush=True)
        res = importlib.import_module(f"bench.{name}").run(quick=args.quick)
        res["seconds"] = round(time.perf_counter() - t0, 2)
        res["date"] = time.strftime("%Y-%m-%d %H:%M:%S")
        results[name] = res
        print(f"bench: {name} done in {res['seconds']} s", flush=True)
    os.makedirs(args.out, exist_ok=True)
    results = _merge_previous(os.path.join(args.out, "results.json"), results, args.quick,
                              partial=bool(args.names or args.merge))
    doc = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "quick": args.quick,
           "machine": machine, "benchmarks": results}
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(doc, f, indent=1, default=str)
    table = markdown(results)
    m = doc["machine"]
    header = (f"Measured {doc['date']} on {m['cpus']} CPUs, torch {m['torch']} "
              f"({m['torch_threads']} threads by default), Python {m['python']}"
              f"{' (quick run: sizes too small to mean anything)' if args.quick else ''}.\n\n")
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(header + table)
    print()
    print(header + table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
