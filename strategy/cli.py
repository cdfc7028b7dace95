"""`python -m strategy`: search, simulate, replay, profile, show and diff strategies.

search and simulate run a workload (an app by name, or a Python file defining an `APP`
record like apps/*.py; strategy/workload.py finds it) through its own command line with its
own flags plus --simulate (and --search): the same code path, flags, report and --json
object as `python apps/NAME.py --simulate ...`. replay, profile, show and diff work on files.
This module never imports the apps. Exit status: 0 done, 2 a usage or input error (said on
stderr).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from parallel_ops.outputs import output_problem

from .workload import WorkloadError, load_workload, workload_names

EXAMPLES = """examples:
  python -m strategy search --app alexnet --small --machine p100 --budget 30 -o alexnet.json
  python -m strategy search --app nmt --machine k80:16 --budget 600 --json -o nmt.msgpack
  python -m strategy simulate --app inception --machine p100 --strategy inception.json
  python -m strategy simulate --app my_app.py --machine dgx-h100:2 --trace predicted.json
  python -m strategy replay --app alexnet --small --devices-per-rank 2 --run-trace run.json
  python -m strategy profile alexnet --small --devices 4 -o alexnet.cpu.profile
  python -m strategy calibrate run1.json run2.json --machine local2.json -o mine
  python -m strategy show alexnet.json --app alexnet --small --graph alexnet-strategy
  python -m strategy diff data_parallel.json searched.json

App flags (--small, --batch-size, --seed, --strategy, --machine, --devices-per-rank,
--profile, --trace, --json, ...) are the apps' own: python -m strategy simulate --app NAME
--help lists them.
"""
APP_HELP = "app name ({}) or a Python file defining APP; its own flags follow"


class CliError(Exception):
    """A mistake the user can fix; printed without a traceback, exit status 2."""


def find_app(name: str):
    """The workload of an app name or a Python file defining APP (strategy/workload.py)."""
    try:
        return load_workload(name)
    except WorkloadError as e:
        raise CliError(f"--app {name}: {e}") from None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m strategy", epilog=EXAMPLES,
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    app_help = APP_HELP.format(", ".join(workload_names()) or "none installed")
    s = sub.add_parser("search", help="MCMC search of a strategy for an app on a machine",
                       add_help=False, epilog=RUN_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("-h", "--help", action="store_true", help="this help, and with --app "
                   "the app's own flags")
    s.add_argument("--app", help=app_help)
    s.add_argument("--budget", type=float, default=30.0, metavar="SECONDS",
                   help="search time (default 30)")
    s.add_argument("--proposals", type=int, metavar="N",
                   help="also stop after N proposals (reproducible with --seed)")
    s.add_argument("-o", "--output", metavar="FILE",
                   help="write the best strategy here (.json for people, else msgpack)")
    m = sub.add_parser("simulate", help="predict an app's iteration time under a strategy "
                       "(data parallel without --strategy)", add_help=False,
                       epilog=RUN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    m.add_argument("-h", "--help", action="store_true", help="this help, and with --app "
                   "the app's own flags")
    m.add_argument("--app", help=app_help)
    r = sub.add_parser("replay", help="simulate a recorded real run's graph and compare")
    r.add_argument("--app", help="the app the run trained, with its flags (default: what the "
                   "trace records)")
    r.add_argument("--run-trace", required=True, metavar="FILE",
                   help="the --trace file of the real run")
    r.add_argument("-o", "--output", metavar="FILE",
                   help="Chrome trace with the measured and predicted timelines")
    r.add_argument("--top", type=int, default=15, help="nodes listed (default 15)")
    c = sub.add_parser("calibrate", help="fit host costs and in-situ task times to recorded "
                       "runs (--trace files); write a machine file and a profile")
    c.add_argument("traces", nargs="+", metavar="RUN_TRACE",
                   help="--trace files of real CPU runs, all of one layout")
    c.add_argument("-o", "--output", required=True, metavar="NAME",
                   help="write NAME.machine.json (for --machine) and NAME.profile (for "
                   "--profile)")
    c.add_argument("--machine", default="local", metavar="PRESET|FILE",
                   help="base model whose devices and links are kept: a file saved under "
                   "the runs' mpirun (mpirun -np R python -m mpi4py -m strategy.machines "
                   "local --save FILE); default 'local' measured now, one device per rank")
    c.add_argument("--base-profile", metavar="FILE",
                   help="the profiler's task times (python -m strategy.costs profile): keys "
                   "the runs did not time get these, scaled to in situ")
    c.add_argument("--no-factor", action="store_true",
                   help="do not fit the iteration factor (docs/simulator.md)")
    c.add_argument("--no-heldout", action="store_true",
                   help="skip the held-out error estimate (3 refits without a third of the "
                   "strategies each: the calibration takes 2-2.5x as long; strategy/heldout.py); "
                   "a search judged by it then keeps data parallelism within its error on "
                   "its own runs")
    sub.add_parser("profile", help="measure an app's task costs (python -m strategy.costs "
                   "profile --help)", add_help=False)
    w = sub.add_parser("show", help="a strategy file as a table (and a graph picture)")
    w.add_argument("file")
    w.add_argument("--app", help="check against this app (with its flags) and name types")
    w.add_argument("--graph", metavar="PATH", help="write PATH.dot and a picture of the "
                   "model coloured by devices: PATH.svg with Graphviz's dot, else PATH.png")
    w.add_argument("--json", action="store_true", help="print the file's JSON view")
    d = sub.add_parser("diff", help="operators whose configs differ between two files")
    d.add_argument("a")
    d.add_argument("b")
    return p


RUN_EPILOG = """The app's own flags follow --app NAME (python -m strategy simulate --app NAME
--help lists them): --small, --batch-size N, --seed S, --strategy FILE, --machine
PRESET|FILE (presets with their sizes in that list), --devices-per-rank K, --profile FILE,
--trace FILE, --json, --quiet, ...
"""


def _run_app(app_name: str, argv: list[str]) -> int:
    """The app's own command line with these flags (its report goes to stdout)."""
    return find_app(app_name).main(argv)


def _app_help(parser, a, out) -> int:
    """search/simulate --help: the command's flags, then the app's own when --app is given."""
    sub = parser._subparsers._group_actions[0].choices[a.command]
    print(sub.format_help(), file=out)
    if not a.app:
        print("Add --app NAME to see the app's own flags.", file=out)
        return 0
    print(f"Flags of --app {a.app} (python -m strategy passes them to it):", file=out, flush=True)
    try:
        return find_app(a.app).main(["--help"])
    except SystemExit as e:                  # argparse's --help exits
        return int(e.code or 0)


def _search_flags(a, rest: list[str]) -> list[str]:
    """The app flags of `search`: its budget, proposals and output checked first, under the
    names the user gave them."""
    if not a.budget > 0:
        raise CliError(f"--budget {a.budget:g}: give the search a positive number of seconds.")
    if a.proposals is not None and a.proposals < 1:
        raise CliError(f"--proposals {a.proposals}: give a positive number of proposals.")
    if a.output:
        problem = output_problem(a.output)
        if problem:
            raise CliError(f"-o {a.output}: {problem}")
    flags = rest + ["--search", f"{a.budget:g}"]
    if a.proposals is not None:
        flags += ["--search-proposals", str(a.proposals)]
    if "--train" not in rest:
        flags.append("--simulate")
    else:
        flags.remove("--train")
    if a.output:
        flags += ["--export", a.output]
    return flags


def main(argv=None, out=None) -> int:
    out = out or sys.stdout
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["profile"]:
        from .costs.__main__ import main as costs_main
        return costs_main(argv, out)
    parser = _parser()
    a, rest = parser.parse_known_args(argv)
    try:
        if a.command in ("search", "simulate") and a.help:
            return _app_help(parser, a, out)
        if a.command in ("search", "simulate") and not a.app:
            raise CliError("--app NAME is required (an app name or a Python file defining "
                           f"APP; apps: {', '.join(workload_names())})")
        if a.command == "search":
            return _run_app(a.app, _search_flags(a, rest))
        if a.command == "simulate":
            return _run_app(a.app, rest + ["--simulate"])
        if a.command == "replay":
            return _replay(a, rest, out)
        if a.command == "calibrate":
            if rest:
                raise CliError(f"unknown arguments {rest} for calibrate")
            return _calibrate(a, out)
        if a.command == "show":
            return _show(a, rest, out)
        if rest:
            raise CliError(f"unknown arguments {rest} for {a.command}")
        return _diff(a, out)
    except CliError as e:
        print(f"python -m strategy {a.command}: error: {e}", file=sys.stderr)
        return 2


def _load(path: str):
    from .files import StrategyFileError, read
    if not os.path.isfile(path):
        raise CliError(f"{path}: no such file")
    try:
        return read(path)
    except StrategyFileError as e:
        raise CliError(str(e)) from None


def _show(a, app_flags, out) -> int:
    from .files import to_dict
    f = _load(a.file)
    if a.json:
        print(json.dumps(to_dict(f.configs, model_name=f.model, machine_info=f.machine,
                                 types=f.types), indent=1), file=out)
        return 0
    if app_flags and not a.app:
        raise CliError(f"unknown arguments {app_flags} (app flags need --app)")
    model = machine = None
    if a.app:
        model = _app_model(a.app, app_flags, f)
        from taskrt import Machine
        machine = Machine.local(int(f.machine.get("devices", 1)))
    from .views import summary, write_graph
    print(f"{a.file}: strategy for model '{f.model}' on {f.machine}", file=out)
    if model is not None:
        print(summary(model, f.configs, machine), file=out)
    else:
        for name, cfg in f.configs.items():
            print(f"  {name:<40} {f.types.get(name, ''):<12} {cfg}", file=out)
    if a.graph:
        if model is None:
            raise CliError("--graph needs --app (the operator graph comes from the model)")
        problem = output_problem(a.graph + ".dot")
        if problem:
            raise CliError(f"--graph {a.graph}: {problem}")
        files = write_graph(a.graph, model, f.configs)
        print("wrote " + ", ".join(files), file=out)
        if any(x.endswith(".png") for x in files):
            print("(drawn with matplotlib: Graphviz's `dot` is not installed; it would draw "
                  "an SVG from the .dot file)", file=out)
    return 0


def _app_model(app_name: str, flags: list[str], f):
    """The app's model built for the device count the strategy file was made for."""
    devices = int(f.machine.get("devices", 1)) if f is not None else 1
    try:
        return find_app(app_name).build_from_flags(flags, devices).model
    except WorkloadError as e:                 # flags the app refuses
        raise CliError(f"--app {app_name} {' '.join(flags)}: {e}") from None


def _diff(a, out) -> int:
    from .views import diff, diff_text
    fa, fb = _load(a.a), _load(a.b)
    if fa.model and fb.model and fa.model != fb.model:
        print(f"note: {a.a} is for model '{fa.model}', {a.b} for '{fb.model}'", file=out)
    print(diff_text(diff(fa.configs, fb.configs), a.a, a.b), file=out)
    return 0


def _replay(a, rest, out) -> int:
    from .replay import ReplayError, replay
    if a.output and output_problem(a.output):
        raise CliError(f"-o {a.output}: {output_problem(a.output)}")
    try:
        report = replay(a.app, rest if a.app else None, a.run_trace)
    except ReplayError as e:
        raise CliError(str(e)) from None
    print(report.text(a.top), file=out)
    if a.output:
        report.write_chrome(a.output)
        print(f"measured and predicted timelines written to {a.output}", file=out)
    return 0


def _calibrate(a, out) -> int:
    from .calibration import CalibrationError, calibrate
    from .costs.profile import Profile, ProfileError
    from .machines import MachineModelError, cluster_model, machine_model
    from .replay import ReplayError, read_trace
    paths = (f"{a.output}.machine.json", f"{a.output}.profile")
    for path in paths:
        if output_problem(path):
            raise CliError(f"-o {a.output}: {path}: {output_problem(path)}")
    try:
        base_profile = Profile.load(a.base_profile) if a.base_profile else None
        base = machine_model(a.machine)
        ranks = int(read_trace(a.traces[0])[1].get("ranks") or 1)
        if base.num_devices == 1 and ranks > 1:
            # One process measured: its device for every rank, links as the cluster
            # preset's defaults (say so: a file saved under mpirun measures them).
            base = cluster_model("local", base.device(0), ranks,
                                 summary="one process's device x ranks, default shm links",
                                 calibration=base.calibration)
            print(f"note: --machine {a.machine} has one device; using it for each of the "
                  f"{ranks} ranks with default links (save 'local' under mpirun -np {ranks} "
                  "for measured ones)", file=out)
        model, profile, fit = calibrate(a.traces, base, base_profile, not a.no_factor,
                                        heldout=not a.no_heldout)
    except (CalibrationError, ReplayError, MachineModelError, ProfileError) as e:
        raise CliError(str(e)) from None
    print(fit.text(), file=out)
    model.save(paths[0])
    profile.save(paths[1])
    print(f"wrote {paths[0]} (--machine) and {paths[1]} (--profile)", file=out)
    return 0
