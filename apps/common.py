"""The command line every app shares: flags, machine, strategy, training loop, reports.

An app module declares an `App` (its name, its builder, its own flags, a mixed strategy
for demos and tests) and calls `main(APP)`. Everything else lives in this package, once:

  --batch-size N (global)  --iterations N  --warmup N  --seed S  --dtype float32|float64|bfloat16
  --strategy FILE (import)  --export FILE (the strategy used, data-parallel defaults filled)
  --search SECONDS  --machine PRESET|FILE  --simulate   (need the simulator/search: issues 6, 7)
  --trace FILE (Chrome/Perfetto timeline of the last iteration; one process track per rank)
  --devices-per-rank K  --device auto|cpu|cuda  --threads T  --small  --json
  --data synthetic|digits (image apps: scikit-learn's digits, with accuracy)  --lr LR

Rank 0 prints: the set-up, the strategy table, one line per iteration (progress, time,
samples/s total and per device, loss) and an end report; with --json its last line is one
JSON object (see `result_json`). User errors (bad flags, unusable strategy files, features
not built yet) print one message and exit with status 2, on every rank, without a traceback.

This module only re-exports; each concept has its own file:

  apps/app.py       App and Network: what an app declares
  apps/flags.py     make_parser and check_args: the flags and their checks
  apps/hooks.py     machine_model, search_strategy, simulate_run: where the simulator and
                    the search plug in
  apps/startup.py   setup: flags, machine, model and strategy on every rank
  apps/training.py  run (the loop, checkpoints, trace) and main (the entry point)
  apps/report.py    Result, report, result_json, strategy_table, parameters
  apps/digits.py    --data digits
  apps/errors.py    UsageError, EXIT_USAGE

No module here owns a model: apps describe networks, parallel_ops trains them.
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from parallel_ops import ParallelConfig  # noqa: E402
from apps.app import App, Network  # noqa: E402
from apps.errors import EXIT_USAGE, UsageError  # noqa: E402
from apps.flags import check_args, make_parser  # noqa: E402
from apps.hooks import machine_model, search_strategy, simulate_run  # noqa: E402
from apps.report import (Result, machine_text, parameters, report, result_json,  # noqa: E402
                         strategy_table)
from apps.startup import setup  # noqa: E402
from apps.training import main, optimizer, run, write_trace  # noqa: E402

P = ParallelConfig.of

__all__ = ["App", "Network", "P", "EXIT_USAGE", "UsageError", "check_args", "make_parser",
           "machine_model", "search_strategy", "simulate_run", "Result", "machine_text",
           "parameters", "report", "result_json", "strategy_table", "setup", "main",
           "optimizer", "run", "write_trace"]
