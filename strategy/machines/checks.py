"""Checks of a machine description (device specs, node types, nodes, switches, links):
every problem, each with its fix. MachineModel and the file loader both use them."""
from __future__ import annotations

import difflib
import math
import re
from typing import Iterable, Mapping, Sequence

from .specs import LINK_KINDS, DeviceSpec, LinkSpec, NodeType

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\Z")
_DEVICE = re.compile(r"d(\d+)\Z")


def _hint(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _bad_number(value, positive: bool) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return True
    return value <= 0 if positive else value < 0


def check_description(device_specs: Mapping[str, DeviceSpec], node_types: Mapping[str, NodeType],
                      nodes: Sequence[str], switches: Sequence[str] = (),
                      links: Sequence[LinkSpec] = (), allreduce_efficiency: float = 1.0
                      ) -> list[str]:
    """Every reason the description is not a usable machine (empty when it is)."""
    out = []
    for kind, s in device_specs.items():
        where = f"device spec '{kind}'"
        if s.kind != kind:
            out.append(f"{where}: its kind is '{s.kind}'; use the same name as its key")
        for field, positive in (("fp32_flops", True), ("fp16_flops", True),
                                ("fp64_flops", True), ("memory_bandwidth", True),
                                ("memory_capacity", True), ("launch_overhead", False)):
            v = getattr(s, field)
            if _bad_number(v, positive):
                out.append(f"{where}: {field} is {v!r}; give a finite number "
                           f"{'above' if positive else 'of at least'} 0")
    for s in switches:
        if not isinstance(s, str) or not _NAME.match(s) or _DEVICE.match(s):
            out.append(f"switch {s!r}: not a valid name; use letters, digits, '_', '.', '-' "
                       "starting with a letter (and not d<number>, which names devices)")
    if len(set(switches)) != len(switches):
        out.append(f"switches {list(switches)}: names repeat; give each switch one name")
    for tname, nt in node_types.items():
        where = f"node type '{tname}'"
        if not nt.devices:
            out.append(f"{where}: no devices; list at least one device kind under \"devices\"")
        for k, kind in enumerate(nt.devices):
            if kind not in device_specs:
                out.append(f"{where}: device d{k} is a '{kind}', which has no spec in "
                           f"\"device_specs\"{_hint(kind, device_specs)}; add a '{kind}' entry "
                           "(copy one from an exported preset) or fix the kind")
        for p in nt.points:
            if not isinstance(p, str) or not _NAME.match(p) or _DEVICE.match(p):
                out.append(f"{where}: point {p!r} is not a valid name; use letters, digits, "
                           "'_', '.', '-' starting with a letter, and not d<number>")
            elif p in switches:
                out.append(f"{where}: point '{p}' has the name of a global switch; rename it")
        if len(set(nt.points)) != len(nt.points):
            out.append(f"{where}: points {list(nt.points)} repeat; give each point one name")
        local = {f"d{k}" for k in range(len(nt.devices))} | set(nt.points) | set(switches)
        for i, ls in enumerate(nt.links):
            lw = f"{where}, link {i} ({ls.kind} {ls.ends[0]}-{ls.ends[1]})"
            out += _link_problems(lw, ls)
            for e in ls.ends:
                if e not in local:
                    out.append(f"{lw}: end '{e}' is not a device (d0..d{len(nt.devices) - 1}), "
                               f"a point of the node ({', '.join(nt.points) or 'none'}) or a "
                               f"switch ({', '.join(switches) or 'none'}){_hint(e, local)}; "
                               "declare it under \"points\" or \"switches\", or fix the name")
            if all(e in switches for e in ls.ends):
                out.append(f"{lw}: joins two global switches; put it under the top-level "
                           "\"links\" instead")
    if not nodes:
        out.append("no nodes; list at least one node type under \"nodes\"")
    for i, t in enumerate(nodes):
        if t not in node_types:
            out.append(f"node n{i}: unknown node type '{t}'{_hint(t, node_types)}; define it "
                       "under \"node_types\" or fix the name")
    for i, ls in enumerate(links):
        lw = f"link {i} ({ls.kind} {ls.ends[0]}-{ls.ends[1]})"
        out += _link_problems(lw, ls)
        for e in ls.ends:
            problem = _global_end_problem(e, node_types, nodes, switches)
            if problem:
                out.append(f"{lw}: {problem}")
    if _bad_number(allreduce_efficiency, True):
        out.append(f"allreduce_efficiency is {allreduce_efficiency!r}; give a finite number "
                   "above 0 (1.0 is the textbook formula)")
    return out


def _link_problems(where: str, ls: LinkSpec) -> list[str]:
    out = []
    if ls.kind not in LINK_KINDS:
        out.append(f"{where}: unknown link kind '{ls.kind}'{_hint(ls.kind, LINK_KINDS)}; use "
                   f"one of {', '.join(LINK_KINDS)}")
    if ls.ends[0] == ls.ends[1]:
        out.append(f"{where}: both ends are '{ls.ends[0]}'; a link joins two different ends")
    if _bad_number(ls.bandwidth, True):
        out.append(f"{where}: bandwidth is {ls.bandwidth!r}; give bytes/s above 0 "
                   "(e.g. 12.5e9 for 100 Gb/s)")
    if _bad_number(ls.latency, False):
        out.append(f"{where}: latency is {ls.latency!r}; give seconds, at least 0 "
                   "(e.g. 1e-6)")
    if ls.name and (not _NAME.match(ls.name)):
        out.append(f"{where}: name {ls.name!r} is not a valid name; use letters, digits, "
                   "'_', '.', '-' starting with a letter")
    return out


def _global_end_problem(end: str, node_types, nodes, switches) -> str:
    if end in switches:
        return ""
    node, sep, local = end.partition("/")
    m = re.fullmatch(r"n(\d+)", node)
    if not sep or not m:
        return (f"end '{end}' is neither a switch ({', '.join(switches) or 'none'}) nor "
                "NODE/NAME such as 'n0/d1' or 'n0/host'; fix the name or declare the switch")
    i = int(m.group(1))
    if i >= len(nodes):
        return (f"end '{end}' refers to node n{i}, which does not exist (nodes n0..n"
                f"{len(nodes) - 1}); use an existing node or add nodes")
    nt = node_types.get(nodes[i])
    if nt is None:
        return ""   # reported for the node itself
    names = [f"d{k}" for k in range(len(nt.devices))] + list(nt.points)
    if local not in names:
        return (f"end '{end}': node n{i} (type '{nodes[i]}') has no '{local}' (it has "
                f"{', '.join(names)}){_hint(local, names)}; fix the name")
    return ""
