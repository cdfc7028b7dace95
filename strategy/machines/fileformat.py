"""Machine files: save and load a MachineModel, JSON for people or msgpack, never pickle.

    {"format": "soapflow-machine", "version": 1, "name": "p100:2", "summary": "...",
     "device_specs": {"P100": {"fp32_flops": 1.06e13, ..., "launch_overhead": 5e-6}},
     "switches": ["fabric"],
     "node_types": {"p100": {"devices": ["P100", ...], "points": ["host"],
                             "links": [{"kind": "nvlink", "ends": ["d0", "d1"],
                                        "latency": 1e-6, "bandwidth": 2e10}, ...]}},
     "nodes": [{"type": "p100", "count": 2}],
     "links": [], "allreduce_efficiency": 1.0,
     "host_costs": {"task": {"seconds": 2e-5, "per_byte": 0.0}, ...}}   # optional

docs/machines.md documents every field. Saving picks JSON for a path ending in .json and
msgpack otherwise; loading tells them apart by content. Loading checks everything and raises
one MachineFileError naming the file and listing every problem with its fix. Writing a loaded
file gives back the same bytes.
"""
from __future__ import annotations

import difflib
import json
import math
from decimal import Decimal

import msgpack

from .errors import MachineFileError, MachineModelError
from .checks import check_description
from .model import MachineModel
from .specs import HOST_KINDS, DeviceSpec, HostCost, LinkSpec, NodeType

FORMAT = "soapflow-machine"
VERSION = 1
SPEC_FIELDS = {"fp32_flops": "FLOP/s, e.g. 1.06e13", "fp16_flops": "FLOP/s, e.g. 2.12e13",
               "fp64_flops": "FLOP/s, e.g. 5.3e12",
               "memory_bandwidth": "bytes/s, e.g. 7.32e11",
               "memory_capacity": "bytes, e.g. 17179869184 for 16 GiB",
               "launch_overhead": "seconds, e.g. 5e-6"}
LINK_FIELDS = {"kind": "", "ends": "", "latency": "seconds, e.g. 1e-6",
               "bandwidth": "bytes/s, e.g. 1.25e10 for 100 Gb/s", "duplex": "", "name": ""}
TOP_FIELDS = ("format", "version", "name", "summary", "device_specs", "switches", "node_types",
              "nodes", "links", "allreduce_efficiency", "calibration", "host_costs")
HOST_FIELDS = {"seconds": "seconds per node, e.g. 2e-5",
               "per_byte": "seconds per byte moved, e.g. 1e-10"}
HOW = "Export a preset with `python -m strategy.machines p100 --save FILE` and edit it."


# -- writing ------------------------------------------------------------------------------
def _link_dict(ls: LinkSpec) -> dict:
    d = {"kind": ls.kind, "ends": list(ls.ends), "latency": ls.latency,
         "bandwidth": ls.bandwidth}
    if not ls.duplex:
        d["duplex"] = False
    if ls.name:
        d["name"] = ls.name
    return d


def to_dict(model: MachineModel) -> dict:
    """The file's object for `model` (runs of equal nodes written as {"type", "count"})."""
    nodes = []
    for t in model.nodes:
        if nodes and isinstance(nodes[-1], dict) and nodes[-1]["type"] == t:
            nodes[-1]["count"] += 1
        elif nodes and nodes[-1] == t:
            nodes[-1] = {"type": t, "count": 2}
        else:
            nodes.append(t)
    data = {"format": FORMAT, "version": VERSION, "name": model.name, "summary": model.summary,
            "device_specs": {k: {f: getattr(s, f) for f in SPEC_FIELDS}
                             for k, s in model.device_specs.items()},
            "switches": list(model.switches),
            "node_types": {k: {"devices": list(nt.devices), "points": list(nt.points),
                               "links": [_link_dict(ls) for ls in nt.links]}
                           for k, nt in model.node_types.items()},
            "nodes": nodes, "links": [_link_dict(ls) for ls in model.links],
            "allreduce_efficiency": model.allreduce_efficiency}
    if model.calibration:
        data["calibration"] = model.calibration
    if model.host_costs:
        data["host_costs"] = {k: {"seconds": c.seconds, "per_byte": c.per_byte}
                              for k, c in model.host_costs.items()}
    return data


def _number(x) -> str:
    """JSON for a number: floats in short exponent form (1.06e13, 5e-06 -> 5e-6), exact."""
    if isinstance(x, bool) or not isinstance(x, float) or not math.isfinite(x) or x == 0:
        return json.dumps(x)
    r = repr(x)
    if "e" not in r and 1e-3 <= abs(x) < 1e5:
        return r
    sign, digits, exp = Decimal(r).normalize().as_tuple()
    mant = str(digits[0]) + ("." + "".join(map(str, digits[1:])) if len(digits) > 1 else "")
    return f"{'-' if sign else ''}{mant}e{exp + len(digits) - 1}"


def _flat(v) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {_flat(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_flat(x) for x in v) + "]"
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return _number(v)
    return json.dumps(v)


def dumps_json(data, level: int = 0) -> str:
    """JSON for people: an object or list on one line when it fits in 100 columns."""
    flat = _flat(data)
    if not isinstance(data, (dict, list)) or not data or len(flat) + 2 * level <= 100:
        return flat
    pad = "  " * (level + 1)
    if isinstance(data, dict):
        items = [f"{pad}{json.dumps(k)}: {dumps_json(v, level + 1)}" for k, v in data.items()]
        return "{\n" + ",\n".join(items) + "\n" + "  " * level + "}"
    items = [pad + dumps_json(v, level + 1) for v in data]
    return "[\n" + ",\n".join(items) + "\n" + "  " * level + "]"


def save(model: MachineModel, path) -> None:
    """Write a machine file: JSON when `path` ends in .json, msgpack otherwise."""
    data = to_dict(model)
    if str(path).lower().endswith(".json"):
        with open(path, "w") as f:
            f.write(dumps_json(data) + "\n")
    else:
        with open(path, "wb") as f:
            f.write(msgpack.packb(data, use_bin_type=True))


# -- reading ------------------------------------------------------------------------------
def load(path) -> MachineModel:
    """Read and check a machine file; raises MachineFileError listing every problem."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise MachineFileError(f"machine file {path}: cannot read it ({e.strerror or e}). "
                               "Check the path, or name a preset (p100, k80, dgx1, dgx-a100, "
                               "dgx-h100, dgx-h200, local).") from None
    return from_bytes(raw, str(path))


def from_bytes(raw: bytes, path: str = "<bytes>") -> MachineModel:
    """Parse a machine file's bytes (JSON or msgpack, told apart by content)."""
    where = f"machine file {path}"
    if not raw.strip():
        raise MachineFileError(f"{where}: the file is empty. {HOW}")
    if raw[:1] == b"\x80" and raw[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        raise MachineFileError(f"{where}: this looks like a Python pickle, which is never "
                               f"loaded (unpickling runs code). {HOW}")
    is_json = raw.lstrip()[:1] in (b"{", b"[")
    try:
        data = json.loads(raw.decode("utf-8")) if is_json else \
            msgpack.unpackb(raw, raw=False, strict_map_key=True)
    except Exception as e:   # every parser error means the same thing to the user
        kind = "JSON" if is_json else "msgpack"
        raise MachineFileError(f"{where}: not a readable {kind} machine file; it is corrupt "
                               f"or truncated ({type(e).__name__}: {e}). Fix it or save it "
                               f"again. {HOW}") from None
    return from_dict(data, path)


class _Problems(list):
    def unknown(self, where: str, d: dict, allowed) -> None:
        for k in d:
            if k not in allowed:
                close = difflib.get_close_matches(str(k), list(allowed), n=1)
                hint = f"did you mean '{close[0]}'?" if close else \
                    f"the keys are {', '.join(allowed)}"
                self.append(f"{where}: unknown key '{k}' ({hint}); remove it or fix the "
                            "spelling")

    def number(self, where: str, d: dict, key: str, units: str, positive=True,
               integer=False, default=1.0):
        if key not in d:
            self.append(f"{where}: \"{key}\" is missing; add it ({units})")
            return default
        v = d[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            self.append(f"{where}: \"{key}\" is {v!r}, not a number; give {units}")
            return default
        if v < 0 or (positive and v == 0):
            self.append(f"{where}: \"{key}\" is {v!r}; it must be "
                        f"{'above' if positive else 'at least'} 0 ({units})")
            return default
        if integer:
            if v != int(v):
                self.append(f"{where}: \"{key}\" is {v!r}; give a whole number of {units}")
                return default
            return int(v)
        return float(v)

    def strings(self, where: str, v, what: str) -> list:
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            self.append(f"{where}: expected a list of {what} names, got {v!r}")
            return []
        return v


def _links(p: _Problems, where: str, items) -> list[LinkSpec]:
    if not isinstance(items, list):
        p.append(f"{where}: \"links\" must be a list of {{\"kind\", \"ends\", \"latency\", "
                 f"\"bandwidth\"}} objects, got {items!r}")
        return []
    out = []
    for i, d in enumerate(items):
        lw = f"{where}link {i}"
        if not isinstance(d, dict):
            p.append(f"{lw}: expected {{\"kind\", \"ends\", \"latency\", \"bandwidth\"}}, "
                     f"got {d!r}")
            continue
        ends = d.get("ends")
        if not (isinstance(ends, list) and len(ends) == 2 and all(isinstance(e, str)
                                                                    for e in ends)):
            p.append(f"{lw}: \"ends\" must be two endpoint names such as [\"d0\", \"host\"], "
                     f"got {ends!r}")
            continue
        lw = f"{lw} ({ends[0]}-{ends[1]})"
        p.unknown(lw, d, LINK_FIELDS)
        kind = d.get("kind")
        if not isinstance(kind, str):
            p.append(f"{lw}: \"kind\" must be a link kind such as \"nvlink\" or \"ib\", "
                     f"got {kind!r}")
            continue
        latency = p.number(lw, d, "latency", LINK_FIELDS["latency"], positive=False,
                           default=0.0)
        bandwidth = p.number(lw, d, "bandwidth", LINK_FIELDS["bandwidth"])
        duplex, name = d.get("duplex", True), d.get("name", "")
        if not isinstance(duplex, bool):
            p.append(f"{lw}: \"duplex\" is {duplex!r}; use true or false")
            duplex = True
        if not isinstance(name, str):
            p.append(f"{lw}: \"name\" is {name!r}; use a string")
            name = ""
        out.append(LinkSpec(kind, (ends[0], ends[1]), latency, bandwidth, duplex, name))
    return out


def _host_costs(p: _Problems, raw) -> dict:
    """The "host_costs" object: {node kind: {"seconds", "per_byte"}} (docs/simulator.md)."""
    if not isinstance(raw, dict):
        p.append(f"top level: \"host_costs\" is {raw!r}; it must map node kinds "
                 f"({', '.join(HOST_KINDS)}) to {{\"seconds\", \"per_byte\"}}, or be left out")
        return {}
    out = {}
    for kind, d in raw.items():
        hw = f"host cost '{kind}'"
        if kind not in HOST_KINDS:
            close = difflib.get_close_matches(str(kind), HOST_KINDS, n=1)
            p.append(f"{hw}: not a node kind ({f'did you mean {close[0]!r}?' if close else ''}"
                     f" the kinds are {', '.join(HOST_KINDS)}); fix or remove it")
            continue
        if not isinstance(d, dict):
            p.append(f"{hw}: expected {{\"seconds\": s, \"per_byte\": s}}, got {d!r}")
            continue
        p.unknown(hw, d, HOST_FIELDS)
        out[kind] = HostCost(*(p.number(hw, d, f, units, positive=False, default=0.0)
                               if f in d else 0.0 for f, units in HOST_FIELDS.items()))
    return out


def from_dict(data, path: str = "<data>") -> MachineModel:
    """Check a file's object and build its MachineModel."""
    where = f"machine file {path}"
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise MachineFileError(f"{where}: not a machine file (no \"format\": \"{FORMAT}\" "
                               f"field). {HOW}")
    if data.get("version") != VERSION:
        raise MachineFileError(f"{where}: format version {data.get('version')!r}, this program "
                               f"reads version {VERSION}. Save the machine again with this "
                               "version.")
    p = _Problems()
    p.unknown("top level", data, TOP_FIELDS)
    name, summary = data.get("name", ""), data.get("summary", "")
    for key, v in (("name", name), ("summary", summary)):
        if not isinstance(v, str):
            p.append(f"top level: \"{key}\" is {v!r}; use a string")
    specs = {}
    raw_specs = data.get("device_specs")
    if not isinstance(raw_specs, dict):
        p.append(f"top level: \"device_specs\" must map device kinds to their speeds, e.g. "
                 f"{{\"P100\": {{{', '.join(SPEC_FIELDS)}}}}}, got {raw_specs!r}")
        raw_specs = {}
    for kind, d in raw_specs.items():
        sw = f"device spec '{kind}'"
        if not isinstance(d, dict):
            p.append(f"{sw}: expected {{{', '.join(SPEC_FIELDS)}}}, got {d!r}")
            d = {}
        p.unknown(sw, d, SPEC_FIELDS)
        vals = {f: p.number(sw, d, f, units, positive=(f != "launch_overhead"),
                            integer=(f == "memory_capacity"),
                            default=1 if f == "memory_capacity" else 1.0)
                for f, units in SPEC_FIELDS.items()}
        specs[kind] = DeviceSpec(kind, **vals)
    switches = p.strings("top level: \"switches\"", data.get("switches", []), "switch")
    types = {}
    raw_types = data.get("node_types")
    if not isinstance(raw_types, dict):
        p.append(f"top level: \"node_types\" must map node type names to {{\"devices\", "
                 f"\"points\", \"links\"}}, got {raw_types!r}")
        raw_types = {}
    for tname, d in raw_types.items():
        tw = f"node type '{tname}'"
        if not isinstance(d, dict):
            p.append(f"{tw}: expected {{\"devices\": [kinds], \"points\": [names], "
                     f"\"links\": [...]}}, got {d!r}")
            continue
        p.unknown(tw, d, ("devices", "points", "links"))
        if "devices" not in d:
            p.append(f"{tw}: \"devices\" is missing; list the kind of each device, e.g. "
                     "[\"P100\", \"P100\"]")
        devices = p.strings(f"{tw}: \"devices\"", d.get("devices", []), "device kind")
        points = p.strings(f"{tw}: \"points\"", d.get("points", []), "point")
        links = _links(p, f"{tw}, ", d.get("links", []))
        types[tname] = NodeType(tuple(devices), tuple(points), tuple(links))
    nodes = []
    raw_nodes = data.get("nodes")
    if not isinstance(raw_nodes, list):
        p.append(f"top level: \"nodes\" must list node types (a name, or {{\"type\": name, "
                 f"\"count\": n}}), got {raw_nodes!r}")
        raw_nodes = []
    for i, e in enumerate(raw_nodes):
        if isinstance(e, str):
            nodes.append(e)
        elif isinstance(e, dict) and isinstance(e.get("type"), str) and \
                not isinstance(e.get("count"), bool) and isinstance(e.get("count"), int) and \
                e["count"] >= 1 and set(e) <= {"type", "count"}:
            nodes += [e["type"]] * e["count"]
        else:
            p.append(f"nodes entry {i}: expected a node type name or {{\"type\": name, "
                     f"\"count\": n >= 1}}, got {e!r}")
    links = _links(p, "top-level ", data.get("links", []))
    efficiency = p.number("top level", data, "allreduce_efficiency",
                          "1.0 for the textbook formulas") \
        if "allreduce_efficiency" in data else 1.0
    calibration = data.get("calibration", {})
    if not isinstance(calibration, dict):
        p.append(f"top level: \"calibration\" is {calibration!r}; it must be an object "
                 "(written by calibrate_local) or left out")
        calibration = {}
    host_costs = _host_costs(p, data.get("host_costs", {}))
    p += check_description(specs, types, nodes, switches, links, efficiency)
    if not p:
        try:
            return MachineModel(name if isinstance(name, str) else "", specs, types, nodes,
                                switches, links, efficiency,
                                summary if isinstance(summary, str) else "", calibration,
                                host_costs)
        except MachineModelError as e:
            p += [line[4:] for line in str(e).splitlines()[1:]] or [str(e)]
    raise MachineFileError(f"{where}: {len(p)} problem{'s' if len(p) > 1 else ''}:\n  - " +
                           "\n  - ".join(p) + f"\n{HOW}")
