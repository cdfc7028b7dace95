"""Benchmarks: `python -m bench` runs every module here and writes results.json / results.md.

Each benchmark module has `run(quick=False) -> dict` returning
  {"title": str, "results": {...JSON-able numbers...}, "rows": [(metric, value, note), ...]}.
Benchmarks report ratios measured side by side in one run, never pass/fail thresholds.
"""
