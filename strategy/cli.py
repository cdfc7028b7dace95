"""`python -m strategy`: search, simulate, replay, profile, show and diff strategies.

search and simulate run an app (by name, or a Python file defining an `APP` record like
apps/*.py) with its own flags plus --simulate (and --search): the same code path, flags, report
and --json object as `python apps/NAME.py --simulate ...`. replay, profile, show and diff work
on files. Exit status: 0 done, 2 a usage or input error (said on stderr).
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys

EXAMPLES = """examples:
  python -m strategy search --app alexnet --small --machine p100 --budget 30 -o alexnet.json
  python -m strategy search --app nmt --machine k80:16 --budget 600 --json -o nmt.msgpack
  python -m strategy simulate --app inception --machine p100 --strategy inception.json
  python -m strategy simulate --app my_app.py --machine dgx-h100:2 --trace predicted.json
  python -m strategy replay --app alexnet --small --devices-per-rank 2 --run-trace run.json
  python -m strategy profile alexnet --small --devices 4 -o alexnet.cpu.profile
  python -m strategy show alexnet.json --app alexnet --small --graph alexnet-strategy
  python -m strategy diff data_parallel.json searched.json

App flags (--small, --batch-size, --seed, --strategy, --machine, --devices-per-rank,
--profile, --trace, --json, ...) are the apps' own: see python apps/NAME.py --help.
"""


class CliError(Exception):
    """A mistake the user can fix; printed without a traceback, exit status 2."""


def find_app(name: str):
    """The App record of apps/<name>.py, or of a Python file defining APP."""
    if name.endswith(".py"):
        if not os.path.isfile(name):
            raise CliError(f"--app {name}: no such file")
        spec = importlib.util.spec_from_file_location(
            "user_app_" + os.path.basename(name)[:-3], name)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        from .costs.app_profile import find_apps
        find_apps()
        try:
            module = importlib.import_module(f"apps.{name}")
        except ModuleNotFoundError:
            raise CliError(f"--app {name}: no such app; use alexnet, inception, resnet, rnntc, "
                           "rnnlm, nmt, transformer, or a Python file defining APP") from None
    app = getattr(module, "APP", None)
    if app is None:
        raise CliError(f"--app {name}: the module defines no APP record (see apps/alexnet.py)")
    return app


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m strategy", epilog=EXAMPLES,
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    s = sub.add_parser("search", help="MCMC search of a strategy for an app on a machine")
    s.add_argument("--app", required=True, help="app name or file (with its own flags)")
    s.add_argument("--budget", type=float, default=30.0, metavar="SECONDS",
                   help="search time (default 30)")
    s.add_argument("--proposals", type=int, metavar="N",
                   help="also stop after N proposals (reproducible with --seed)")
    s.add_argument("-o", "--output", metavar="FILE",
                   help="write the best strategy here (.json for people, else msgpack)")
    m = sub.add_parser("simulate", help="predict an app's iteration time under a strategy "
                       "(data parallel without --strategy)")
    m.add_argument("--app", required=True, help="app name or file (with its own flags)")
    r = sub.add_parser("replay", help="simulate a recorded real run's graph and compare")
    r.add_argument("--app", required=True, help="the app the run trained (with its flags)")
    r.add_argument("--run-trace", required=True, metavar="FILE",
                   help="the --trace file of the real run")
    r.add_argument("-o", "--output", metavar="FILE",
                   help="Chrome trace with the measured and predicted timelines")
    r.add_argument("--top", type=int, default=15, help="nodes listed (default 15)")
    sub.add_parser("profile", help="measure an app's task costs (python -m strategy.costs "
                   "profile --help)", add_help=False)
    w = sub.add_parser("show", help="a strategy file as a table (and a graph picture)")
    w.add_argument("file")
    w.add_argument("--app", help="check against this app (with its flags) and name types")
    w.add_argument("--graph", metavar="PATH", help="write PATH.dot (and PATH.svg when "
                   "Graphviz's dot is installed): the model coloured by devices")
    w.add_argument("--json", action="store_true", help="print the file's JSON view")
    d = sub.add_parser("diff", help="operators whose configs differ between two files")
    d.add_argument("a")
    d.add_argument("b")
    return p


def _run_app(app_name: str, argv: list[str]) -> int:
    """The app's own main with these flags (its report goes to stdout)."""
    app = find_app(app_name)
    from apps.training import main as app_main
    return app_main(app, argv)


def main(argv=None, out=None) -> int:
    out = out or sys.stdout
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["profile"]:
        from .costs.__main__ import main as costs_main
        return costs_main(argv, out)
    a, rest = _parser().parse_known_args(argv)
    try:
        if a.command == "search":
            flags = rest + ["--search", f"{a.budget:g}"]
            if a.proposals is not None:
                flags += ["--search-proposals", str(a.proposals)]
            if "--train" not in rest:
                flags.append("--simulate")
            else:
                flags.remove("--train")
            if a.output:
                flags += ["--export", a.output]
            return _run_app(a.app, flags)
        if a.command == "simulate":
            return _run_app(a.app, rest + ["--simulate"])
        if a.command == "replay":
            return _replay(a, rest, out)
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
        files = write_graph(a.graph, model, f.configs)
        print("wrote " + ", ".join(files), file=out)
        if not any(x.endswith(".svg") for x in files):
            print("(no SVG: install Graphviz for the `dot` program, or render the .dot "
                  "file elsewhere)", file=out)
    return 0


def _app_model(app_name: str, flags: list[str], f):
    """The app's model built for the device count the strategy file was made for."""
    from .costs.app_profile import load_app
    devices = int(f.machine.get("devices", 1)) if f is not None else 1
    find_app(app_name)
    from apps.errors import UsageError
    try:
        _, net, _, _ = load_app(app_name, flags, devices)
    except (UsageError, ValueError) as e:      # bad flags; an app file rather than a name
        raise CliError(f"--app {app_name} {' '.join(flags)}: {e}") from None
    return net.model


def _diff(a, out) -> int:
    from .views import diff, diff_text
    fa, fb = _load(a.a), _load(a.b)
    if fa.model and fb.model and fa.model != fb.model:
        print(f"note: {a.a} is for model '{fa.model}', {a.b} for '{fb.model}'", file=out)
    print(diff_text(diff(fa.configs, fb.configs), a.a, a.b), file=out)
    return 0


def _replay(a, rest, out) -> int:
    from .replay import ReplayError, replay
    try:
        report = replay(a.app, rest, a.run_trace)
    except ReplayError as e:
        raise CliError(str(e)) from None
    print(report.text(a.top), file=out)
    if a.output:
        report.write_chrome(a.output)
        print(f"measured and predicted timelines written to {a.output}", file=out)
    return 0
