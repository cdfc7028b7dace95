"""Views of a strategy for people: the table the apps print (`strategy_table`), a summary with
per-device totals (`summary`), the difference of two strategies (`diff`, `diff_text`) and the
operator graph coloured by device set as Graphviz DOT (`to_dot`), drawn to SVG where the
`dot` program is installed and to PNG with matplotlib where it is not (`write_graph`,
strategy/graph_picture.py).

A strategy here is what the rest of the code passes around: operator name -> ParallelConfig
(a dict from `strategy.files.load`, a search, or an app's mixed strategy). Operators it does
not name run data parallel when lowered; given a machine, the views show that default
(marked), without one they show the operator as "not set". This module only reads: saving,
loading and checking strategies is strategy/files.py's job.

    print(summary(model, configs, machine))
    print(diff_text(diff(a, b, model), "a.json", "b.json"))
    write_graph("alexnet_mixed", model, configs, machine)   # .dot, and .svg or .png
"""
from __future__ import annotations

import colorsys
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Mapping

from parallel_ops.config import ParallelConfig, data_parallel, format_devices

NOT_SET = "(not set)"


# -- rows shared by the apps' table and the summary ------------------------------------------

def degrees_text(cfg: ParallelConfig) -> str:
    """The split degrees other than 1, e.g. 'n=2,c=2'; '-' when the operator is whole."""
    return ",".join(f"{k}={v}" for k, v in cfg.degrees if v != 1) or "-"


def _fold_rows(ops: list, key_of, fold: bool) -> list[tuple[object, list]]:
    """(key, ops) rows in model order; with `fold`, consecutive operators of one key share
    a row."""
    rows: list[tuple[object, list]] = []
    for op in ops:
        key = key_of(op)
        if fold and rows and rows[-1][0] == key:
            rows[-1][1].append(op)
        else:
            rows.append((key, [op]))
    return rows


def _row_name(ops: list) -> tuple[str, str]:
    """(operator, type) cells of a row: one operator, or 'first .. last (N ops)'."""
    if len(ops) == 1:
        return ops[0].name, ops[0].display_type
    types = sorted({o.display_type for o in ops})
    t = ",".join(types) if len(types) <= 3 else f"{len(types)} types"
    return f"{ops[0].name} .. {ops[-1].name} ({len(ops)} ops)", t


def strategy_table(model, configs: Mapping[str, ParallelConfig], max_rows: int = 40) -> str:
    """Operator, type, config and devices (what the apps print); runs of operators with one
    config share a row when the model has more than `max_rows` operators."""
    def key(op):
        cfg = configs[op.name]
        return degrees_text(cfg), format_devices(cfg.devices)
    rows = _fold_rows(model.ops, key, len(model.ops) > max_rows)
    names = [_row_name(ops) for _, ops in rows]
    w = max(len("operator"), *(len(n) for n, _ in names))
    tw = max(len("type"), *(len(t) for _, t in names))
    lines = [f"  {'operator':<{w}}  {'type':<{tw}}  {'config':<14} devices"]
    for (k, _), (n, t) in zip(rows, names):
        lines.append(f"  {n:<{w}}  {t:<{tw}}  {k[0]:<14} {k[1]}")
    return "Strategy:\n" + "\n".join(lines)


# -- summary ---------------------------------------------------------------------------------

def _filled(model, configs: Mapping[str, ParallelConfig], machine):
    """(config or None, is_default) per operator name, in model order: the strategy's,
    else data parallelism when the machine is known, else None."""
    out = {}
    for op in model.ops:
        cfg = configs.get(op.name)
        if cfg is not None:
            out[op.name] = (cfg, False)
        elif machine is not None:
            out[op.name] = (data_parallel(op, machine), True)
        else:
            out[op.name] = (None, True)
    return out


def _table(header: tuple, rows: list[tuple]) -> list[str]:
    """Left-aligned columns, two spaces apart, indented by two."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return ["  " + "  ".join(f"{str(c):<{w}}" for c, w in zip(r, widths)).rstrip()
            for r in [header, *rows]]


def summary(model, configs: Mapping[str, ParallelConfig], machine=None,
            max_rows: int | None = None) -> str:
    """A table of every operator (type, config, devices, parts), then per device how many
    operators have a part there and how many parts it runs. With `max_rows`, a model with
    more operators folds consecutive operators of one config into a row.

        print(summary(model, files.load("s.json", model, machine), machine))
    """
    filled = _filled(model, configs, machine)
    fold = max_rows is not None and len(model.ops) > max_rows

    def key(op):
        cfg, default = filled[op.name]
        return (None, default) if cfg is None else (degrees_text(cfg), cfg.devices, default)
    rows = []
    for k, ops in _fold_rows(model.ops, key, fold):
        name, type_ = _row_name(ops)
        cfg, default = filled[ops[0].name]
        if cfg is None:
            rows.append((name, type_, NOT_SET, "-", "-"))
        else:
            mark = " *" if default else ""
            rows.append((name, type_, degrees_text(cfg) + mark, format_devices(cfg.devices),
                         cfg.num_parts))
    n_dev = f", {len(machine)} devices" if machine is not None else ""
    lines = [f"Strategy of model '{model.name}' ({len(model.ops)} operators{n_dev}):"]
    lines += _table(("operator", "type", "config", "devices", "parts"), rows)
    if any(default for _, default in filled.values()):
        lines.append("  * not in the strategy: data parallel by default" if machine is not None
                     else f"  {NOT_SET}: not in the strategy (data parallel on the machine "
                          "it runs on)")
    unknown = [n for n in configs if n not in filled]
    if unknown:
        lines.append(f"  not operators of model '{model.name}' (ignored): {', '.join(unknown)}")

    ops_on: dict[int, int] = {}
    parts_on: dict[int, int] = {}
    if machine is not None:
        for d in range(len(machine)):
            ops_on[d] = parts_on[d] = 0
    for cfg, _ in filled.values():
        if cfg is None:
            continue
        for d in cfg.devices:
            parts_on[d] = parts_on.get(d, 0) + 1
        for d in set(cfg.devices):
            ops_on[d] = ops_on.get(d, 0) + 1
    lines.append("Per device:")
    lines += _table(("device", "operators", "parts"),
                    [(d, ops_on[d], parts_on[d]) for d in sorted(parts_on)])
    return "\n".join(lines)


# -- diff ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Change:
    """One operator whose config differs; `old` or `new` is None where a strategy lacks it."""
    op: str
    old: ParallelConfig | None
    new: ParallelConfig | None

    def __str__(self) -> str:
        return f"{self.op}: {_config_text(self.old)} -> {_config_text(self.new)}"


def _config_text(cfg: ParallelConfig | None) -> str:
    return "(absent)" if cfg is None else str(cfg)


def same_config(a: ParallelConfig, b: ParallelConfig) -> bool:
    """Equal splits: the same degrees other than 1 (in any order) on the same devices."""
    return a.devices == b.devices and \
        {k: v for k, v in a.degrees if v != 1} == {k: v for k, v in b.degrees if v != 1}


def diff(a: Mapping[str, ParallelConfig], b: Mapping[str, ParallelConfig],
         model=None) -> list[Change]:
    """The operators whose config differs between strategies `a` and `b`, and those only one
    of them names; in model order when `model` is given (then names the model lacks), else
    in `a`'s order, then `b`'s.

        diff(searched, data_parallel_configs, model)  # [Change('fc6', [o=4]@0-3, [n=4]@0-3)]
    """
    order = [op.name for op in model.ops] if model is not None else []
    out = []
    for name in dict.fromkeys([*order, *a, *b]):
        old, new = a.get(name), b.get(name)
        if old is None and new is None:
            continue
        if old is None or new is None or not same_config(old, new):
            out.append(Change(name, old, new))
    return out


def diff_text(changes: list[Change], name_a: str, name_b: str) -> str:
    """`diff`'s result for people: one line per operator, old config -> new config."""
    if not changes:
        return f"{name_a} and {name_b} are identical (no operator's config differs)."
    rows = [(c.op, _config_text(c.old), "->", _config_text(c.new)) for c in changes]
    n = len(changes)
    head = f"{name_a} -> {name_b}: {n} operator{'s' if n > 1 else ''} differ{'' if n > 1 else 's'}"
    return "\n".join([head + ":", *_table(("operator", name_a, "", name_b), rows)])


# -- the graph -------------------------------------------------------------------------------

def colours(n: int) -> list[str]:
    """`n` distinct light fill colours ('#rrggbb'), hues spread by the golden ratio, paler
    and darker rounds once the hues get close; dark text stays readable on all of them."""
    out: list[str] = []
    seen = set()
    k = 0
    while len(out) < n:
        if k > 100 * n + 100:
            raise ValueError(f"colours: cannot make {n} distinct colours")
        hue = (k * 0.6180339887) % 1.0
        sat = (0.35, 0.2, 0.5)[(k // 10) % 3]
        val = (0.97, 0.85, 0.75)[(k // 30) % 3]
        r, g, b = colorsys.hsv_to_rgb(hue, sat, val)
        c = f"#{round(255 * r):02x}{round(255 * g):02x}{round(255 * b):02x}"
        if c not in seen:
            seen.add(c)
            out.append(c)
        k += 1
    return out


def _quote(text: str) -> str:
    """A DOT string literal (lines broken with \\n)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def device_set(cfg: ParallelConfig | None) -> tuple[int, ...] | None:
    """The distinct devices a config uses, sorted (the colour key)."""
    return None if cfg is None else tuple(sorted(set(cfg.devices)))


def edges(model) -> dict[tuple[str, str], list]:
    """(producer, consumer) operator names -> the tensors between them, in model order."""
    names = {id(op) for op in model.ops}
    out: dict[tuple[str, str], list] = {}
    for op in model.ops:
        for t in op.inputs:
            p = t.producer
            if p is not None and id(p) in names:
                tensors = out.setdefault((p.name, op.name), [])
                if t not in tensors:
                    tensors.append(t)
    return out


@dataclass
class GraphStyle:
    """What both pictures of the graph show: per operator its box text and fill colour, and
    the legend (device set text, operator count, colour)."""
    text: dict[str, str]
    fill: dict[str, str]
    legend: list[tuple[str, int, str]]


def graph_style(model, configs: Mapping[str, ParallelConfig], machine=None) -> GraphStyle:
    """Box texts (name, type, config), fill colours by device set, and the legend."""
    filled = _filled(model, configs, machine)
    sets = sorted({device_set(c) for c, _ in filled.values() if c is not None},
                  key=lambda s: (len(s), s))
    colour = dict(zip(sets, colours(len(sets))))
    colour[None] = "#ffffff"
    text, fill, counts = {}, {}, {}
    for op in model.ops:
        cfg, default = filled[op.name]
        state = NOT_SET if cfg is None else str(cfg) + (" (default)" if default else "")
        text[op.name] = "\n".join((op.name, op.display_type, state))
        fill[op.name] = colour[device_set(cfg)]
        counts[device_set(cfg)] = counts.get(device_set(cfg), 0) + 1
    legend = []
    for s in sets + ([None] if None in counts else []):
        name = NOT_SET if s is None else f"device{'s' if len(s) > 1 else ''} " \
            f"{format_devices(s)}"
        legend.append((name, counts[s], colour[s]))
    return GraphStyle(text, fill, legend)


def to_dot(model, configs: Mapping[str, ParallelConfig], machine=None) -> str:
    """Graphviz DOT of the operator graph: a box per operator (name, type, config) filled
    with the colour of its device set, an edge per producer -> consumer pair labelled with
    the tensors' shapes, and a legend cluster of device sets and colours."""
    style = graph_style(model, configs, machine)
    node = {op.name: f"n{i}" for i, op in enumerate(model.ops)}
    lines = [f"digraph {_quote(model.name)} {{",
             "  rankdir=TB;",
             '  node [shape=box, style="filled,rounded", fontname="Helvetica", fontsize=10];',
             '  edge [fontname="Helvetica", fontsize=8];']
    for op in model.ops:
        lines.append(f"  {node[op.name]} [label={_quote(style.text[op.name])}, "
                     f"fillcolor=\"{style.fill[op.name]}\"];")
    for (src, dst), tensors in edges(model).items():
        shapes = ", ".join("x".join(map(str, t.shape)) for t in tensors)
        names = ", ".join(t.name for t in tensors)
        lines.append(f"  {node[src]} -> {node[dst]} [label={_quote(shapes)}, "
                     f"tooltip={_quote(names)}];")
    lines += ["  subgraph cluster_legend {", '    label="devices";', "    rank=sink;"]
    for i, (name, n, fill) in enumerate(style.legend):
        label = _quote(f"{name}: {n} op" + ("s" if n > 1 else ""))
        lines.append(f"    legend{i} [label={label}, fillcolor=\"{fill}\"];")
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


def write_graph(path: str, model, configs: Mapping[str, ParallelConfig],
                machine=None) -> list[str]:
    """Write `path`.dot and a picture: `path`.svg where Graphviz's `dot` is installed, else
    `path`.png drawn with matplotlib (strategy/graph_picture.py); a .dot, .svg or .png
    ending of `path` is dropped first. Returns the files written.

        write_graph("out/alexnet", model, configs)   # ['out/alexnet.dot', 'out/alexnet.svg']
    """
    base = str(path)
    if base.lower().endswith((".dot", ".svg", ".png")):
        base = base[:-4]
    dot_path, svg_path = base + ".dot", base + ".svg"
    with open(dot_path, "w") as f:
        f.write(to_dot(model, configs, machine))
    written = [dot_path]
    program = shutil.which("dot")
    if program is None:
        from .graph_picture import draw_png
        draw_png(base + ".png", model, graph_style(model, configs, machine), edges(model))
        return written + [base + ".png"]
    done = subprocess.run([program, "-Tsvg", dot_path, "-o", svg_path],
                          capture_output=True, text=True)
    if done.returncode != 0:
        if os.path.exists(svg_path):
            os.remove(svg_path)
        raise RuntimeError(f"write_graph: '{program} -Tsvg {dot_path}' failed (exit "
                           f"{done.returncode}): {done.stderr.strip()}. The DOT file is "
                           f"written; draw it with another Graphviz tool.")
    written.append(svg_path)
    return written
