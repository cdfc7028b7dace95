"""Strategy views on real models (AlexNet --small and its mixed strategy, a small branching
parallel_ops Model): the summary lists every operator and counts parts per device, diff finds
exactly the changed operators, the DOT graph has one node per operator, one edge per
producer -> consumer pair and one colour per device set, and `dot` draws it where installed."""
import re
import shutil

import pytest

from parallel_ops import Model, ParallelConfig
from strategy import views
from strategy.costs.app_profile import load_app
from taskrt import Machine

P = ParallelConfig.of


@pytest.fixture(scope="module")
def alexnet():
    net = load_app("alexnet", ["--small"], 4)
    return net.model, net.mixed_strategy(net.model, 4)


def branchy():
    """x -> fc1 -> act -> {left, right} -> sum -> twice (adds a tensor to itself) -> loss."""
    m = Model("branchy", seed=0)
    x = m.input("x", (8, 6))
    y = m.input("y", (8,), dtype="int64")
    h = m.relu(m.linear(x, 16, name="fc1"), name="act")
    s = m.add(m.linear(h, 5, name="left"), m.linear(h, 5, name="right"), name="sum")
    m.softmax_cross_entropy(m.add(s, s, name="twice"), y, name="loss")
    return m


BRANCHY_EDGES = {("fc1", "act"), ("act", "left"), ("act", "right"), ("left", "sum"),
                 ("right", "sum"), ("sum", "twice"), ("twice", "loss")}
BRANCHY = {"fc1": P([0, 1, 2, 3], n=2, o=2), "act": P([3, 1], a1=2), "left": P([1, 3], i=2),
           "right": P([2, 0], i=2), "sum": P([1, 1], n=2), "twice": P([2]), "loss": P([0])}


def section(text: str, title: str) -> list[list[str]]:
    """Rows (split on 2+ spaces) of the table after line `title`, header included."""
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith(title)) + 1
    rows = []
    for line in lines[start:]:
        if not line.startswith("  ") or line.startswith("  *") or line.startswith("  (not"):
            break
        rows.append(re.split(r" {2,}", line.strip()))
    return rows


def test_apps_print_the_same_table():
    from apps import report
    assert report.strategy_table is views.strategy_table


def test_summary_lists_every_operator(alexnet):
    model, mixed = alexnet
    text = views.summary(model, mixed, Machine.local(4))
    rows = section(text, "Strategy of model 'alexnet'")
    assert rows[0] == ["operator", "type", "config", "devices", "parts"]
    assert [r[0] for r in rows[1:]] == [op.name for op in model.ops]
    by_name = {r[0]: r for r in rows[1:]}
    assert by_name["fc6"] == ["fc6", "linear+relu", "o=4", "0-3", "4"]    # its fused ReLU
    assert by_name["conv1"] == ["conv1", "conv2d+relu", "h=4", "0-3", "4"]
    assert by_name["conv2"][2] == "n=4 *"           # not in the mixed strategy: the default
    assert "* not in the strategy: data parallel by default" in text
    devices = section(text, "Per device:")
    assert devices == [["device", "operators", "parts"]] + \
        [[str(d), "16", "16"] for d in range(4)]


def test_summary_counts_parts_per_device():
    text = views.summary(branchy(), BRANCHY, Machine.local(5))
    rows = section(text, "Strategy of model 'branchy'")
    assert [r[0] for r in rows[1:]] == list(BRANCHY)
    assert rows[3] == ["left", "linear", "i=2", "1,3", "2"]
    assert rows[7] == ["loss", "softmax_ce", "-", "0", "1"]
    # device: operators with a part there, parts it runs ("sum" puts both parts on 1);
    # device 4 runs nothing but is listed.
    assert section(text, "Per device:")[1:] == [
        ["0", "3", "3"], ["1", "4", "5"], ["2", "3", "3"], ["3", "3", "3"], ["4", "0", "0"]]
    assert "*" not in text


def test_summary_without_machine_and_with_foreign_names(alexnet):
    model, mixed = alexnet
    text = views.summary(model, dict(mixed, nonsense=P([0])))
    rows = {r[0]: r for r in section(text, "Strategy of model 'alexnet'")[1:]}
    assert rows["conv2"][2:] == ["(not set)", "-", "-"]
    assert len(rows) == len(model.ops)
    assert "not operators of model 'alexnet' (ignored): nonsense" in text
    assert section(text, "Per device:")[1] == ["0", "8", "8"]     # the 8 operators set


def test_summary_folds_runs_of_one_config(alexnet):
    model, mixed = alexnet
    rows = section(views.summary(model, mixed, Machine.local(4), max_rows=10),
                   "Strategy of model")[1:]
    assert ["conv2 .. flat (8 ops)", "4 types", "n=4 *", "0-3", "4"] in rows
    counted = sum(int(re.search(r"\((\d+) ops\)", r[0]).group(1)) if "ops)" in r[0] else 1
                  for r in rows)
    assert counted == len(model.ops) and len(rows) < len(model.ops)


def test_diff_finds_exactly_the_changes(alexnet):
    model, mixed = alexnet
    assert views.diff(mixed, dict(mixed), model) == []
    changed = dict(mixed, fc7=P([0, 1], n=2))
    assert views.diff(mixed, changed, model) == [Change("fc7", mixed["fc7"], P([0, 1], n=2))]
    # degrees of 1 and the order of degrees do not make a difference
    same = dict(mixed, conv1=ParallelConfig((("n", 1), ("h", 4)), (0, 1, 2, 3)))
    assert views.diff(mixed, same, model) == []
    # only in one of them; model order whatever the dicts' order
    b = {k: v for k, v in reversed(list(mixed.items())) if k != "fc8"}
    b["conv3"] = P([0])
    assert views.diff(mixed, b, model) == [Change("conv3", None, P([0])),
                                          Change("fc8", mixed["fc8"], None)]
    assert [c.op for c in views.diff(mixed, b)] == ["fc8", "conv3"]   # a's order, then b's


def test_diff_text(alexnet):
    model, mixed = alexnet
    assert "identical" in views.diff_text([], "a.json", "b.json")
    changes = views.diff(mixed, dict(mixed, fc7=P([0, 1], n=2)), model)
    text = views.diff_text(changes, "a.json", "b.json")
    assert text.splitlines()[0] == "a.json -> b.json: 1 operator differs:"
    assert re.split(r" {2,}", text.splitlines()[2].strip()) == \
        ["fc7", "[o=4]@0-3", "->", "[n=2]@0-1"]
    assert "identical" not in text


Change = views.Change
NODE = re.compile(r'^  (n\d+) \[label="([^"]*)", fillcolor="(#[0-9a-f]{6})"\];$')
EDGE = re.compile(r"^  (n\d+) -> (n\d+) \[")
LEGEND = re.compile(r'^    legend\d+ \[label="([^"]*)", fillcolor="(#[0-9a-f]{6})"\];$')


def parse_dot(text: str):
    """Operator nodes (id -> (name, colour)), edges (name pairs) and legend (label, colour)."""
    assert text.count("{") == text.count("}") and text.rstrip().endswith("}")
    depth = 0
    for ch in text:
        depth += {"{": 1, "}": -1}.get(ch, 0)
        assert depth >= 0
    nodes, edges, legend = {}, [], []
    for line in text.splitlines():
        if m := NODE.match(line):
            nodes[m.group(1)] = (m.group(2).split("\\n")[0], m.group(3))
        elif m := EDGE.match(line):
            edges.append((nodes[m.group(1)][0], nodes[m.group(2)][0]))
        elif m := LEGEND.match(line):
            legend.append((m.group(1), m.group(2)))
    return nodes, edges, legend


def test_dot_of_alexnet_is_its_chain(alexnet):
    model, mixed = alexnet
    nodes, edges, legend = parse_dot(views.to_dot(model, mixed, Machine.local(4)))
    names = [op.name for op in model.ops]
    assert [n for n, _ in nodes.values()] == names
    assert edges == list(zip(names, names[1:]))                  # AlexNet is a chain
    assert legend == [("devices 0-3: 16 ops", nodes["n0"][1])]


def test_dot_colours_by_device_set():
    model = branchy()
    text = views.to_dot(model, BRANCHY)
    nodes, edges, legend = parse_dot(text)
    assert re.search(r'-> n\d+ \[label="8x5", tooltip="sum"\];', text)   # one tensor, one edge
    colour = {name: c for name, c in nodes.values()}
    assert len(nodes) == len(model.ops) and set(colour) == set(BRANCHY)
    assert len(edges) == len(set(edges)) and set(edges) == BRANCHY_EDGES
    # act on [3, 1] and left on [1, 3] share a device set; sum on [1, 1] is on {1}
    sets = {name: frozenset(cfg.devices) for name, cfg in BRANCHY.items()}
    for a in BRANCHY:
        for b in BRANCHY:
            assert (colour[a] == colour[b]) == (sets[a] == sets[b]), (a, b)
    assert len(legend) == len(set(sets.values())) == 6
    assert len({c for _, c in legend}) == 6 and {c for _, c in legend} == set(colour.values())
    assert ("devices 1,3: 2 ops", colour["act"]) in legend
    assert ("device 1: 1 op", colour["sum"]) in legend


def test_dot_without_machine_marks_unset_operators(alexnet):
    model, mixed = alexnet
    nodes, _, legend = parse_dot(views.to_dot(model, mixed))
    unset = {c for name, c in nodes.values() if name not in mixed}
    assert unset == {"#ffffff"} and ("(not set): 8 ops", "#ffffff") in legend
    assert len({c for _, c in legend}) == len(legend) == 2


def test_colours_are_distinct():
    for n in (1, 7, 64, 300):
        cs = views.colours(n)
        assert len(cs) == n == len(set(cs))
        assert all(re.fullmatch(r"#[0-9a-f]{6}", c) and c != "#ffffff" for c in cs)


def test_write_graph_without_dot_draws_a_png(tmp_path, monkeypatch, alexnet):
    """Without Graphviz the picture is drawn with matplotlib (part of the install)."""
    monkeypatch.setenv("PATH", str(tmp_path))          # no `dot` on the path
    model, mixed = alexnet
    written = views.write_graph(tmp_path / "g.dot", model, mixed)
    assert written == [str(tmp_path / "g.dot"), str(tmp_path / "g.png")]
    assert (tmp_path / "g.dot").read_text() == views.to_dot(model, mixed)
    assert not (tmp_path / "g.svg").exists()
    png = (tmp_path / "g.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert width > 200 and height > 200


def test_graph_layers_follow_the_edges(alexnet):
    model, _ = alexnet
    from strategy.graph_picture import layers
    depth = layers(model, views.edges(model))
    for src, dst in views.edges(model):
        assert depth[dst] > depth[src], (src, dst)
    assert depth["conv1"] == 0 and depth["loss"] == max(depth.values())


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_write_graph_draws_svg(tmp_path, alexnet):
    model, mixed = alexnet
    written = views.write_graph(tmp_path / "alexnet", model, mixed, Machine.local(4))
    assert written == [str(tmp_path / "alexnet.dot"), str(tmp_path / "alexnet.svg")]
    svg = (tmp_path / "alexnet.svg").read_text()
    assert "<svg" in svg and svg.count('class="node"') == len(model.ops) + 1   # + legend
    assert svg.count('class="edge"') == len(model.ops) - 1
    assert all(f">{op.name}<" in svg for op in model.ops)
