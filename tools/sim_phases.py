"""Where a `--simulate` run's CPU goes, phase by phase (docs/design.md "Simulator speed").

    python tools/sim_phases.py                  # GPT-3 2.7B, data parallel, 128 H100s
    python tools/sim_phases.py 1024 32          # GPUs (DGX-H100 nodes of 8), blocks
    python tools/sim_phases.py 1024 32 megatron # Megatron t=8 (bench/sim_scaling.py's)

A strategy other than data parallel reaches the app as a user's would: `--strategy FILE`,
a file that a child process writes first (strategy.experts.megatron(model, gpus, 8,
tensor_parallel=8) saved by strategy.files; not timed).

Runs apps/gpt.py --simulate (bf16, Adam, one sequence per GPU) in this process with timers
around the functions that make up each phase (lowering, the one-shot plan's steps, the
simulator's task classes, node arrays, timeline and memory model, the report) and prints
JSON: process CPU seconds per phase, and per graph node, with the prediction (iteration ms,
the largest device peak, and a digest of every node's times, each device's peak and busy
time: equal digests, equal predictions). The imports are those of
apps/gpt.py; numba's start (~0.25 s: its import and the cached kernels' load) lands in the
phase that first calls a compiled kernel (the planner's valid-piece kernels, else the
timeline), so a phase's share of it moves with the plan; the interpreter's exit is not
seen from inside (apps/scriptgc.py). Phases nest (planning holds its steps): they do not
add up. Run from the repository root with PYTHONPATH set to it; numbers on a shared machine
need old and new code taking turns.
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import resource
import runpy
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stdout

# (label, module, attribute path): what a phase runs.
PHASES = [
    ("lowering", "parallel_ops.lowering", "lower"),
    ("planning", "taskrt.planner", "plan"),
    ("planning: expand", "taskrt.planner", "Planner._expand"),
    ("planning: region classes", "taskrt.regionclasses", "RegionClasses.find"),
    ("planning: add_launch", "taskrt.planner", "Planner.add_launch"),
    ("planning: node groups", "taskrt.planner", "Planner.refresh"),
    ("planning: finish (object graph)", "taskrt.planner", "Planner.finish"),
    ("simulation", "strategy.simulator", "simulate"),
    ("simulation: task classes", "taskrt.taskclasses", "TaskClasses.of"),
    ("simulation: node arrays", "strategy.timearrays", "node_arrays_by_class"),
    ("simulation: timeline", "strategy.simulator", "timeline"),
    ("simulation: memory (Liveness)", "taskrt.liveness", "Liveness.on_timeline"),
    ("simulation: memory's sweep", "strategy.memsweep", "liveness_peak"),
    ("report", "apps.simulate", "prediction_report"),
]


def _timed(cpu: dict, calls: dict, returned: dict, label: str, module: str,
           path: str) -> None:
    """Replace module.path by a wrapper adding its process CPU to cpu[label], counting its
    calls in calls[label] (a fast phase can take less CPU than the clock shows) and keeping
    its last result in returned[label], also where another module imported the function by
    name."""
    owner = importlib.import_module(module)
    *outer, name = path.split(".")
    for part in outer:
        owner = getattr(owner, part)
    raw = owner.__dict__[name]
    func = raw.__func__ if isinstance(raw, (classmethod, staticmethod)) else raw

    def wrapper(*args, **kwargs):
        start = time.process_time()
        calls[label] = calls.get(label, 0) + 1
        try:
            returned[label] = func(*args, **kwargs)
            return returned[label]
        finally:
            cpu[label] = cpu.get(label, 0.0) + time.process_time() - start
    wrapper.__wrapped__ = func
    setattr(owner, name, type(raw)(wrapper) if isinstance(raw, (classmethod, staticmethod))
            else wrapper)
    if not outer:
        for other in list(sys.modules.values()):
            if getattr(other, name, None) is func:
                setattr(other, name, wrapper)


STRATEGIES = ("dp", "megatron")


def _app_flags(gpus: int, blocks: int) -> list[str]:
    return ["--config", "gpt3-2.7b", "--layers", str(blocks), "--machine",
            f"dgx-h100:{gpus // 8}", "--batch-size", str(gpus), "--dtype", "bfloat16",
            "--optimizer", "adam", "--simulate", "--quiet"]


def write_strategy(path: str, kind: str, gpus: int, blocks: int) -> None:
    """Save strategy `kind` for the GPT of these flags to `path` (in this process)."""
    import warnings
    warnings.simplefilter("ignore")
    from apps.gpt import APP
    from apps.startup import setup
    from strategy import files
    from strategy.experts import megatron
    s = setup(APP, _app_flags(gpus, blocks))
    assert kind == "megatron", kind
    files.save(path, megatron(s.network.model, gpus, 8, tensor_parallel=8), s.network.model,
               s.machine)


def measure(gpus: int = 128, blocks: int = 32, strategy: str = "dp") -> dict:
    if strategy not in STRATEGIES:
        raise SystemExit(f"sim_phases: strategy {strategy!r} is not one of {STRATEGIES}")
    if strategy != "dp":
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, f"{strategy}.msgpack")
            subprocess.run([sys.executable, __file__, "--write-strategy", path, strategy,
                            str(gpus), str(blocks)], check=True)
            return measure_flags(gpus, blocks, strategy, ["--strategy", path])
    return measure_flags(gpus, blocks, strategy, [])


def measure_flags(gpus: int, blocks: int, strategy: str, extra: list[str]) -> dict:
    cpu: dict[str, float] = {}
    calls: dict[str, int] = {}
    returned: dict = {}
    start = time.process_time()
    import apps.gpt  # noqa: F401  (torch and the apps, as the script imports them)
    import apps.simulate  # noqa: F401
    cpu["imports (torch, apps)"] = time.process_time() - start
    for label, module, path in PHASES:
        _timed(cpu, calls, returned, label, module, path)
    sys.argv = ["apps/gpt.py", *_app_flags(gpus, blocks), *extra]
    try:
        with redirect_stdout(sys.stderr):            # (the report; stdout gets the JSON)
            runpy.run_path("apps/gpt.py", run_name="__main__")
    except SystemExit as e:
        if e.code:
            raise
    cpu["whole run (inside the process)"] = time.process_time() - start
    r = returned["simulation"]
    n = len(r.start)
    digest = hashlib.sha256()
    for a in (r.start, r.end, r.run):
        digest.update(b"-" if a is None else a.tobytes())
    digest.update(repr((r.makespan, sorted(r.memory.items()), sorted(r.busy.items()),
                        sorted(r.over_capacity.items()))).encode())
    return {"gpus": gpus, "blocks": blocks, "strategy": strategy, "nodes": n,
            "iteration_ms": r.makespan * 1e3, "peak_memory_gb": max(r.memory.values()) / 2**30,
            "prediction_sha256": digest.hexdigest()[:16],
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "calls": calls,
            "cpu_s": {k: round(v, 3) for k, v in cpu.items()},
            "us_per_node": {k: round(v / n * 1e6, 2) for k, v in cpu.items()}}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write-strategy"]:
        path, kind, g, b = sys.argv[2:6]
        write_strategy(path, kind, int(g), int(b))
    else:
        args = [int(a) for a in sys.argv[1:3]] + sys.argv[3:4]
        print(json.dumps(measure(*args), indent=1))
