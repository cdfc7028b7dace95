"""The command line every app shares: flags, machine, strategy, training loop, reports.

An app module declares an `App` (its name, its builder, its own flags, a mixed strategy
for demos and tests) and calls `main(APP)`. Everything else lives in this package, once:

  --batch-size N (global)  --iterations N  --warmup N  --seed S  --dtype float32|float64|bfloat16
  --strategy FILE (import)  --export FILE (the strategy used, data-parallel defaults filled)
  --search SECONDS  --machine PRESET|FILE  --simulate  --profile FILE  (docs/search.md,
                    docs/simulator.md)
  --trace FILE (Chrome/Perfetto timeline of the last iteration; one process track per rank)
  --checkpoint-dir DIR  --checkpoint-every N  --resume  (docs/checkpoints.md)
  --devices-per-rank K  --device auto|cpu|cuda  --threads T  --small  --json  --quiet
  --data synthetic|digits (image apps: scikit-learn's digits, with accuracy)  --lr LR
  --continue-on-nan

Rank 0 prints: the set-up, the strategy table, one line per iteration (progress, time,
samples/s total and per device, loss) and an end report; with --json its last line is one
JSON object (see `result_json`). User errors (bad flags, unusable strategy files, places
that cannot be written, a loss that is nan or inf) print one message and exit with status 2,
on every rank, without a traceback.

This module only re-exports; each concept has its own file:

  apps/app.py        App and Network: what an app declares (and the strategy tools' Workload)
  apps/flags.py      make_parser, check_args, check_inputs, check_outputs
  apps/runconfig.py  RunConfig: the run's frozen configuration, built once from the flags
  apps/startup.py    setup -> Setup: flags, machine, configuration, model and strategy
  apps/hooks.py      machine_model, search_strategy, simulate_run: where the simulator and
                     the search plug in; keep_output
  apps/training.py   run (the loop, checkpoints, trace) and main (the entry point)
  apps/report.py     Result, report, result_json, strategy_table, parameters
  apps/nonfinite.py  what a nan or inf loss stops the run with
  apps/progress.py   progress bars for slow phases
  apps/digits.py     --data digits
  apps/errors.py     UsageError, EXIT_USAGE

No module here owns a model: apps describe networks, parallel_ops trains them.
"""
from __future__ import annotations

from parallel_ops import ParallelConfig
from apps.app import App, Network
from apps.errors import EXIT_USAGE, UsageError
from apps.flags import check_args, make_parser
from apps.hooks import machine_model, search_strategy, simulate_run
from apps.report import (Result, machine_text, parameters, report, result_json,
                         strategy_table)
from apps.runconfig import RunConfig
from apps.startup import Setup, optimizer, setup
from apps.training import main, run, write_trace

P = ParallelConfig.of

__all__ = ["App", "Network", "P", "EXIT_USAGE", "UsageError", "check_args", "make_parser",
           "machine_model", "search_strategy", "simulate_run", "Result", "machine_text",
           "parameters", "report", "result_json", "strategy_table", "RunConfig", "Setup",
           "setup", "main", "optimizer", "run", "write_trace"]
