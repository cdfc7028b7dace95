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
device counts, devices out of range), each with a fix. This module owns the format only:
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

from parallel_ops.config import ParallelConfig, validate
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
    is_json = raw.lstrip()[:1] == b"{"
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


def from_dict(data, path: str = "<data>") -> StrategyFile:
    """Check the structure of a file's object and build its configs."""
    where = f"strategy file {path}"
    if not isinstance(data, dict) or data.get("format") != FORMAT:
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
        if not isinstance(entry, dict) or not isinstance(entry.get("degrees", {}), dict) \
                or not isinstance(entry.get("devices"), list):
            problems.append(f"operator '{name}': expected {{\"degrees\": {{dim: degree}}, "
                            f"\"devices\": [ids]}}, got {entry!r}")
            continue
        if "type" in entry:
            types[name] = entry["type"]
        degrees = tuple(entry.get("degrees", {}).items())
        configs[name] = ParallelConfig(degrees, tuple(entry["devices"]))
    if problems:
        raise StrategyFileError(f"{where}: {len(problems)} malformed entries:\n  - " +
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
        try:
            validate(op, cfg, machine)
        except ConfigError as e:
            out.append(str(e).rstrip("."))
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
