"""Strategy files: save and load a strategy (operator name -> ParallelConfig) safely.

The file is msgpack (never pickle: strategy files come from other people) holding

    {"format": "soapflow-strategy", "version": 1,
     "model": "inception_v3",
     "machine": {"devices": 4, "ranks": 2, "kinds": ["cpu"]},
     "operators": {"Conv2d_1a_3x3/conv": {"type": "conv2d", "degrees": {"n": 4},
                                           "devices": [0, 1, 2, 3]}, ...}}

Degrees are by dim name in the operator's own order and devices are global device ids, so
a file reads like `ParallelConfig.of([0, 1, 2, 3], n=4)`. A path ending in `.json` gets the
same object as JSON, one operator per line, for people to read and edit. Loading sniffs the
content, so either kind loads whatever its name. Round trips are exact: reading a file gives
back the configs, in order, and writing them again gives the same bytes.

`load` checks a file against a model and a machine and reports every problem at once
(another model, unknown operators, operator types, unknown dims, degrees above an extent,
device counts, devices out of range: one line when the file was made for a bigger machine),
each with a fix. Values of the wrong type (a device id "1", a degree true) are refused when
the file is read, naming the operator. This module owns the format only:
searching and simulating strategies belong to other modules.

    save("s.json", trainer.configs, model, machine)
    strategy = load("s.json", model, machine)      # raises StrategyFileError listing problems
"""
from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from typing import Mapping

import msgpack

from parallel_ops.config import ParallelConfig, config_problems
from parallel_ops.errors import ConfigError

FORMAT = "soapflow-strategy"
VERSION = 1


class StrategyFileError(ConfigError):
    """A strategy file cannot be read, or does not fit the model or machine it is used for."""


@dataclass
class StrategyFile:
    """The content of a strategy file: configs in file order plus what they were made for."""
    model: str
    machine: dict
    configs: dict[str, ParallelConfig]
    types: dict[str, str] = field(default_factory=dict)   # operator name -> operator type
    version: int = VERSION


def machine_summary(machine) -> dict:
    """What a file records about the machine a strategy was made for."""
    kinds = sorted({d.kind for d in machine.devices})
    return {"devices": len(machine.devices), "ranks": machine.num_ranks, "kinds": kinds}


def to_dict(configs: Mapping[str, ParallelConfig], model=None, machine=None, *,
            model_name: str | None = None, machine_info: dict | None = None,
            types: Mapping[str, str] | None = None) -> dict:
    """The file's object for `configs`; the model gives its name and operator types."""
    if model is not None:
        model_name = model.name
        types = {op.name: op.type for op in model.ops}
    if machine is not None:
        machine_info = machine_summary(machine)
    ops = {}
    for name, cfg in configs.items():
        entry = {}
        if types and name in types:
            entry["type"] = types[name]
        entry["degrees"] = {k: v for k, v in cfg.degrees}
        entry["devices"] = list(cfg.devices)
        ops[name] = entry
    return {"format": FORMAT, "version": VERSION, "model": model_name or "",
            "machine": dict(machine_info or {}), "operators": ops}


def dumps_json(data: dict) -> str:
    """JSON for people: header fields first, then one operator per line."""
    head = {k: v for k, v in data.items() if k != "operators"}
    lines = ["{"]
    for k, v in head.items():
        lines.append(f"  {json.dumps(k)}: {json.dumps(v)},")
    ops = data.get("operators", {})
    lines.append('  "operators": {' + ("" if ops else "}"))
    items = list(ops.items())
    for i, (name, entry) in enumerate(items):
        comma = "," if i + 1 < len(items) else ""
        lines.append(f"    {json.dumps(name)}: {json.dumps(entry)}{comma}")
    if ops:
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def save(path: str, configs: Mapping[str, ParallelConfig], model=None, machine=None,
         **kw) -> None:
    """Write a strategy file: JSON when `path` ends in .json, msgpack otherwise."""
    data = to_dict(configs, model, machine, **kw)
    if str(path).lower().endswith(".json"):
        with open(path, "w") as f:
            f.write(dumps_json(data))
    else:
        with open(path, "wb") as f:
            f.write(msgpack.packb(data, use_bin_type=True))


def save_file(path: str, sf: StrategyFile) -> None:
    """Write back a file as read (the exact round trip of `read`)."""
    save(path, sf.configs, model_name=sf.model, machine_info=sf.machine, types=sf.types)


def read(path: str) -> StrategyFile:
    """Parse a strategy file without checking it against a model (errors name the file)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise StrategyFileError(f"strategy file {path}: cannot read it ({e.strerror or e}). "
                                "Check the path.") from None
    return from_bytes(raw, path)


def from_bytes(raw: bytes, path: str = "<bytes>") -> StrategyFile:
    """Parse the bytes of a strategy file (msgpack or JSON, told apart by content)."""
    if not raw:
        raise StrategyFileError(f"strategy file {path}: the file is empty. Export a strategy "
                                "with an app's --export FILE.")
    is_json = _looks_like_json(raw)
    try:
        if is_json:
            data = json.loads(raw.decode("utf-8"))
        else:
            data = msgpack.unpackb(raw, raw=False, strict_map_key=True)
    except Exception as e:   # every parser error means the same thing to the user
        kind = "JSON" if is_json else "msgpack"
        raise StrategyFileError(
            f"strategy file {path}: not a readable {kind} strategy file, it is corrupt or "
            f"truncated ({type(e).__name__}: {e}). Export it again with --export FILE."
        ) from None
    return from_dict(data, path)


def _looks_like_json(raw: bytes) -> bool:
    """JSON text (any top-level value) rather than msgpack: msgpack's maps and arrays start
    with bytes that cannot start UTF-8 text."""
    try:
        text = raw.decode("utf-8").lstrip()
    except UnicodeDecodeError:
        return False
    return text[:1] in set('{["-0123456789tfn')


_KIND = {dict: "an object", list: "a list", str: "a string", int: "a number",
         float: "a number", bool: "a boolean", type(None): "null"}


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _entry_problems(name: str, entry) -> list[str]:
    """What is wrong with the types of one operator's entry (values are checked against a
    model later, by `problems`)."""
    shape = '{"degrees": {dim: degree}, "devices": [ids]}'
    if not isinstance(entry, dict) or not isinstance(entry.get("degrees", {}), dict) \
            or not isinstance(entry.get("devices"), list):
        return [f"operator '{name}': expected {shape}, got {entry!r}"]
    out = []
    for dim, deg in entry.get("degrees", {}).items():
        if not _is_int(deg):
            out.append(f"operator '{name}': degree {json.dumps(deg)} on '{dim}' is "
                       f"{_KIND.get(type(deg), type(deg).__name__)}; write a whole number "
                       "(1 for no split)")
    wrong = [d for d in entry["devices"] if not _is_int(d)]
    if wrong:
        out.append(f"operator '{name}': device ids {json.dumps(wrong)} are not whole numbers; "
                   "write them as numbers, e.g. [0, 1]")
    return out


def from_dict(data, path: str = "<data>") -> StrategyFile:
    """Check the structure of a file's object and build its configs."""
    where = f"strategy file {path}"
    if not isinstance(data, dict):
        raise StrategyFileError(f"{where}: not a strategy file (its top level is "
                                f"{_KIND.get(type(data), type(data).__name__)}; a strategy "
                                f"file is an object with \"format\": \"{FORMAT}\" and "
                                "\"operators\"). Export one with an app's --export FILE.")
    if data.get("format") != FORMAT:
        raise StrategyFileError(f"{where}: not a strategy file (no \"format\": \"{FORMAT}\" "
                                "field). Export one with an app's --export FILE.")
    version = data.get("version")
    if version != VERSION:
        raise StrategyFileError(f"{where}: format version {version!r}, this program reads "
                                f"version {VERSION}. Export the strategy again with this "
                                "version.")
    ops = data.get("operators")
    if not isinstance(ops, dict):
        raise StrategyFileError(f"{where}: \"operators\" must map operator names to "
                                "{\"degrees\": {...}, \"devices\": [...]}.")
    problems, configs, types = [], {}, {}
    for name, entry in ops.items():
        found = _entry_problems(name, entry)
        if found:
            problems += found
            continue
        if "type" in entry:
            types[name] = entry["type"]
        degrees = tuple(entry.get("degrees", {}).items())
        configs[name] = ParallelConfig(degrees, tuple(entry["devices"]))
    if problems:
        raise StrategyFileError(f"{where}: {len(problems)} malformed "
                                f"entr{'ies' if len(problems) > 1 else 'y'}:\n  - " +
                                "\n  - ".join(problems))
    machine = data.get("machine") if isinstance(data.get("machine"), dict) else {}
    return StrategyFile(str(data.get("model", "")), machine, configs, types, version)


def problems(sf: StrategyFile, model, machine) -> list[str]:
    """Every reason `sf` cannot be used for `model` on `machine` (empty when it fits)."""
    out = []
    if sf.model and sf.model != model.name:
        out.append(f"the file is for model '{sf.model}', this model is '{model.name}'; use a "
                   f"strategy exported from this model (--export FILE)")
    ops = {op.name: op for op in model.ops}
    # A file made for a bigger machine: one line for the devices this one lacks, not one
    # per operator (devices beyond what the file was made for are still listed per operator)
    made_for = sf.machine.get("devices")
    size = made_for if _is_int(made_for) and made_for > len(machine) else len(machine)
    beyond = [name for name, c in sf.configs.items() if name in ops
              and any(len(machine) <= d < size for d in c.devices)]
    if beyond:
        n = len(beyond)
        out.append(f"the file was made for {size} devices; this machine has {len(machine)} "
                   f"(0..{len(machine) - 1}), so {n} operator{'s' if n > 1 else ''} ("
                   f"{', '.join(beyond[:3])}{', ...' if n > 3 else ''}) use devices it lacks. "
                   "Use a strategy made for this machine: search one (--search SECONDS) or "
                   "export one here (--export FILE)")
    for name, cfg in sf.configs.items():
        op = ops.get(name)
        if op is None:
            close = difflib.get_close_matches(name, list(ops), n=1)
            hint = f"did you mean '{close[0]}'?" if close else "remove it from the file"
            out.append(f"unknown operator '{name}': model '{model.name}' has no operator of "
                       f"that name; {hint}")
            continue
        if name in sf.types and sf.types[name] != op.type:
            out.append(f"operator '{name}' is a {op.type} in the model but a "
                       f"{sf.types[name]} in the file; the file was made for another model")
            continue
        found = config_problems(op, cfg, size)
        if found:
            out.append(f"{op.type} '{op.name}' config {cfg}: " + "; ".join(found))
    return out


def load(path: str, model, machine) -> dict[str, ParallelConfig]:
    """Read a strategy file and check it against `model` and `machine`.

    Raises StrategyFileError naming the file and listing every problem. Operators the file
    does not name are left out of the result (they default to data parallelism)."""
    sf = read(path)
    found = problems(sf, model, machine)
    if found:
        raise StrategyFileError(
            f"strategy file {path} does not fit model '{model.name}' on {len(machine)} "
            f"devices; {len(found)} problem{'s' if len(found) > 1 else ''}:\n  - " +
            "\n  - ".join(found))
    return dict(sf.configs)
