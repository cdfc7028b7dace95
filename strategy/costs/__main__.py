"""Command line of the cost model.

    python -m strategy.costs profile APP [APP FLAGS] [--devices N] [--device cpu|cuda]
                                   [--repeats R] [--warmup W] [-o FILE]
    python -m strategy.costs from-trace TRACE [-o FILE] [--app APP [APP FLAGS]]
    python -m strategy.costs show FILE [--top K] [--json]

`profile` measures every cost key a search on up to N devices may need for the app built
with its own flags (e.g. --small), skipping keys FILE already holds for this device kind,
and merges the result into FILE. `from-trace` takes the task costs of a real CPU run's
--trace (in situ: a task inside an iteration runs slower than alone) and merges them into
FILE, replacing the keys it measured (the app and its flags come from the trace; give them
for a trace that does not record them). `show` summarizes a profile (JSON view with --json).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from .profile import Profile, ProfileError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m strategy.costs", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    pr = sub.add_parser("profile", help="measure an app's task costs on this machine")
    pr.add_argument("app", help="an app's name (alexnet, inception, resnet, ...) or a Python "
                    "file defining APP, followed by its own flags")
    pr.add_argument("--devices", type=int, default=4, metavar="N",
                    help="largest degree a search may use (default 4)")
    pr.add_argument("--device", default="cpu", help="torch device to measure on (cpu, cuda, "
                    "cuda:1; default cpu)")
    pr.add_argument("--repeats", type=int, default=5)
    pr.add_argument("--warmup", type=int, default=2)
    pr.add_argument("-o", "--output", default=None,
                    help="profile file to merge into (default APP.<kind>.profile)")
    pr.add_argument("--threads", type=int, default=1, help="torch threads (default 1, as the "
                    "apps use per rank)")
    ft = sub.add_parser("from-trace", help="task costs from a real run's --trace file")
    ft.add_argument("trace")
    ft.add_argument("-o", "--output", default=None,
                    help="profile file to merge into (default TRACE.profile)")
    ft.add_argument("--app", default=None, help="the app that ran, when the trace does not "
                    "say (its flags follow)")
    sh = sub.add_parser("show", help="summarize a profile file")
    sh.add_argument("file")
    sh.add_argument("--top", type=int, default=10, help="slowest K entries per kind")
    sh.add_argument("--json", action="store_true", help="print the file's JSON view")
    return p


def _profile(a, app_argv, out) -> int:
    import torch

    from ..workload import WorkloadError
    from .app_profile import profile_app
    from .profile import device_kind
    if a.devices < 1:
        print(f"--devices {a.devices}: use 1 or more.", file=sys.stderr)
        return 2
    torch.set_num_threads(a.threads)
    output = a.output or f"{a.app}.{device_kind(a.device)}.profile"
    t = time.perf_counter()
    last = [t]

    def progress(done, total, node, m):
        now = time.perf_counter()
        if now - last[0] > 5 or done == total:
            last[0] = now
            print(f"  {done}/{total} keys, {now - t:.0f} s", file=out, flush=True)
    try:
        prof = profile_app(a.app, app_argv, a.devices, a.device, a.repeats, a.warmup, output,
                           progress)
    except WorkloadError as e:
        print(f"error: {' '.join([a.app, *app_argv])}: {e}", file=sys.stderr)
        return 2
    run = prof.meta["runs"][0]
    print(f"{a.app} {' '.join(app_argv)}: {run['keys']} cost keys from {run['graphs']} graphs "
          f"(built in {run['build_s']:.1f} s), {run['measured']} measured on {run['kind']} in "
          f"{run['seconds'] - run['build_s']:.1f} s, {len(prof.failures)} failed; written to "
          f"{output}", file=out)
    return 0


def _from_trace(a, app_argv, out) -> int:
    import os

    from ..replay import profile_from_trace
    prof = profile_from_trace(a.trace, a.app, app_argv or None)
    output = a.output or f"{os.path.splitext(a.trace)[0]}.profile"
    if os.path.exists(output):
        prof = Profile.load(output).merge(prof)
    prof.save(output)
    run = prof.meta["runs"][-1]
    print(f"{a.trace}: {len(prof.keys(run['kind']))} cost keys on {run['kind']} in {output} "
          f"({run['app']} {' '.join(run['argv'])}, {run['layout']} devices)", file=out)
    return 0


def _show(a, out) -> int:
    prof = Profile.load(a.file)
    if a.json:
        print(json.dumps(prof.to_dict(), indent=1), file=out)
        return 0
    print(f"{a.file}: {prof.summary()}", file=out)
    for run in prof.meta.get("runs", []):
        print("  run: " + ", ".join(f"{k} {v}" for k, v in run.items()), file=out)
    for kind in prof.kinds():
        rows = sorted(((m.seconds, k) for (k, d), m in prof.times.items() if d == kind),
                      reverse=True)[:a.top]
        total = sum(m.seconds for (k, d), m in prof.times.items() if d == kind)
        print(f"{kind}: {len(prof.keys(kind))} keys, {total * 1e3:.4g} ms in all; slowest:",
              file=out)
        for sec, key in rows:
            # (per requirement (privilege, shape, dtype), and for a Red+ how it is stored)
            shapes = " ".join("x".join(map(str, req[1])) for req in key[1][:3])
            work = prof.work.get(key)
            print(f"  {sec * 1e3:9.4g} ms  {key[0][0]} {key[0][-1]} [{shapes}]"
                  f"{'  ' + str(work) if work else ''}", file=out)
    return 0


def main(argv=None, out=None) -> int:
    out = out or sys.stdout
    a, rest = _parser().parse_known_args(argv)
    try:
        if a.command == "profile":
            return _profile(a, rest, out)
        if a.command == "from-trace":
            return _from_trace(a, rest, out)
        if rest:
            print(f"unknown arguments {rest}", file=sys.stderr)
            return 2
        return _show(a, out)
    except (ProfileError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
