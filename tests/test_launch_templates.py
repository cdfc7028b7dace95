"""Launch templates (parallel_ops/launch_template.py): operators of one structure share what
their launches ask for per point (parts, layouts, saved bytes), operators that differ in
anything their part() may read do not, and a part's rect outside its tensor is still
refused. What the launches ask for is unchanged (tests/test_graph_golden.py)."""
import pytest

from parallel_ops import SAMPLE, SGD, Dim, Model, Op, ParallelConfig, PartSpec, lower
from parallel_ops.launch_template import signature
from taskrt import Machine, Rect
from taskrt.errors import PrivilegeError


def blocks(width=8, batch=8):
    """Two identical hidden layers (fc1, fc2) and a different one (fc3)."""
    m = Model("blocks", seed=0)
    x = m.input("x", (batch, width), requires_grad=True)
    y = m.input("y", (batch,), dtype="int64")
    h = m.linear(m.linear(x, width, name="fc1"), width, name="fc2")
    m.softmax_cross_entropy(m.linear(h, 5, name="fc3"), y, name="loss")
    return m


def launch(low, name):
    return next(l for l in low.launches if l.name == name)


def test_identical_operators_share_parts_layouts_and_saved_bytes():
    low = lower(blocks(), {}, Machine.grid(4, 1), SGD(lr=0.1))
    for kind in ("fwd", "bwd"):
        one, two = launch(low, f"fc1/{kind}"), launch(low, f"fc2/{kind}")
        assert one.args.specs is two.args.specs, kind
        assert one.args.layouts is two.args.layouts, kind
        assert one.saved_bytes is two.saved_bytes, kind
        for c in one.colors:           # the same rects (one object), each on its own region
            a, b = one.requirements(c), two.requirements(c)
            assert [r.rect for r in a] == [r.rect for r in b]
            assert all(p.rect is q.rect for p, q in zip(a, b))
            assert all(p.region is not q.region for p, q in zip(a, b))
    fc3 = launch(low, "fc3/fwd")
    assert fc3.args.specs is not launch(low, "fc1/fwd").args.specs


def _rows_like(op: Op, model: Model, inputs: list) -> None:
    """A test operator's inputs, and one output shaped like its first input, split by rows."""
    n, f = inputs[0].shape
    op.inputs = inputs
    model.new_tensor(op, (n, f))
    op.dims = (Dim("n", SAMPLE, n),)
    op.labels = None


class Window(Op):
    """A custom operator whose part() reads an attribute that is not a parameter: each
    part reads `ahead` more input rows than it writes (clipped to the input)."""
    type = "window"

    def __init__(self, model: Model, x, ahead: int, name: str):
        super().__init__(name)
        self.ahead = ahead
        _rows_like(self, model, [x])

    def part(self, degrees, color):
        (lo, hi), = self.ranges(degrees, color).values()
        f = self.inputs[0].shape[1]
        return PartSpec((Rect((lo, 0), (min(hi + self.ahead, self.inputs[0].shape[0]), f)),),
                        (), (Rect((lo, 0), (hi, f)),))

    def forward(self, spec, inputs, weights):
        return [inputs[0][:spec.outputs[0].shape[0]] * 2]


def windows(aheads, rows=8):
    m = Model("windows", seed=0)
    x = m.input("x", (rows, 4))
    for k, ahead in enumerate(aheads):
        x = m.add_op(Window(m, x, ahead, f"w{k}")).outputs[0]
    return m


def test_operators_differing_in_what_part_reads_do_not_share():
    model = windows([1, 2, 1])
    low = lower(model, {}, Machine.grid(4, 1), None, training=False)
    w0, w1, w2 = (launch(low, f"w{k}/fwd") for k in range(3))
    for op, l in zip(model.ops, (w0, w1, w2)):       # every point: the op's own part()
        for c in l.colors:
            spec = op.part((4,), c)
            assert l.args.specs[c] == spec
            assert l.requirements(c)[0].rect == spec.inputs[0]
    assert w0.args.specs is w2.args.specs
    assert signature(model.ops[0], {}) == signature(model.ops[2], {})
    assert signature(model.ops[0], {}) != signature(model.ops[1], {})


def test_a_part_outside_its_tensor_is_refused():
    model = windows([1])
    model.ops[0].part = lambda degrees, color: PartSpec(
        (Rect((0, 0), (9, 4)),), (), (Rect((0, 0), (2, 4)),))
    with pytest.raises(PrivilegeError, match=r"Requirement on 'x': rect \[0:9,0:4\] is not "
                                             r"inside the region \[0:8,0:4\]"):
        lower(model, {}, Machine.grid(4, 1), None, training=False)


def test_operators_signatures_are_interned_and_equal_by_value_after_a_restart(monkeypatch):
    """A stage's signature holds its operator's as one object per value (interned), so a
    template lookup compares it by identity; a restart of the interning (a bound reached)
    leaves signatures equal by value, and the templates are found again."""
    import parallel_ops.launch_template as lt
    model = windows([1, 2, 1])
    low = lower(model, {}, Machine.grid(4, 1), None, training=False)   # (sets op.training)
    a, b, c = (signature(op, {}) for op in model.ops)
    assert a.value[0] is c.value[0] and a == c
    assert a.value[0] is not b.value[0] and a != b
    assert signature(model.ops[0], {}).value[0] is a.value[0]      # another lowering's
    monkeypatch.setattr(lt, "REMEMBERED_SIGNATURES", 1)
    again = signature(model.ops[2], {})             # (the interned ones dropped)
    assert again == a and again != b
    low2 = lower(model, {}, Machine.grid(4, 1), None, training=False)
    for k in range(3):
        assert launch(low, f"w{k}/fwd").args.specs is launch(low2, f"w{k}/fwd").args.specs


class Skewed(Op):
    """Reads `a` everywhere but in its first point and `b` everywhere: a walk of its points
    meets b's region (and the output's) before a's."""
    type = "skewed"

    def __init__(self, model: Model, a, b, name: str):
        super().__init__(name)
        _rows_like(self, model, [a, b])

    def part(self, degrees, color):
        (lo, hi), = self.ranges(degrees, color).values()
        f = self.inputs[0].shape[1]
        rows = Rect((lo, 0), (hi, f))
        return PartSpec((Rect((0, 0), (0, 0)) if color == (0,) else rows, rows), (), (rows,))

    def forward(self, spec, inputs, weights):
        return [inputs[1] * 2]


def skewed_model() -> Model:
    """A Skewed operator (4 points: its first skips input `a`) feeding a linear layer and a
    loss, and its strategy: a model whose points do not ask alike."""
    m = Model("skew", seed=0)
    a = m.input("a", (8, 4), requires_grad=True)
    b = m.input("b", (8, 4), requires_grad=True)
    out = m.add_op(Skewed(m, a, b, name="skewed")).outputs[0]
    y = m.input("y", (8,), dtype="int64")
    m.softmax_cross_entropy(m.linear(out, 5, name="fc"), y, name="loss")
    return m


def _walk_regions(launch) -> list:
    """The regions a walk of `launch`'s points in color order meets, each once, in order."""
    seen = {}
    for c in launch.colors:
        for r in launch.projection(c):
            seen.setdefault(id(r.region), r.region)
    return list(seen.values())


def test_lowered_tables_name_their_regions_in_the_order_a_walk_meets_them():
    """A lowered launch's projection is a RequirementsTable (taskrt/launch.py) whose regions
    are the ones its points name, in the walk's order (repeats allowed): the planner learns a
    launch's regions from them (taskrt/expand.py) and the graph lists regions in that
    order. On random configs of Inception (small) and on an operator whose first point
    skips its first input; expand and the walk leave the same regions known, in order."""
    import random

    from strategy.costs.app_profile import load_app
    from strategy.standard import random_config
    from taskrt import Planner
    from taskrt.expand import expand, expand_walk
    from taskrt.launch import RequirementsTable
    from taskrt.privilege import RegionRequirement

    m = skewed_model()
    machine = Machine.grid(4, 1)
    cases = [(m, {"skewed": ParallelConfig.of(range(4), n=4)}, machine)]
    net = load_app("inception", ["--small"], 16).model
    rng = random.Random(3)
    for _ in range(3):
        cases.append((net, {op.name: random_config(op, range(16), rng) for op in net.ops},
                      Machine.grid(4, 4)))
    tables = skipped_first = 0
    for model, strategy, mach in cases:
        low = lower(model, strategy, mach, SGD(lr=0.1))
        via, walked = Planner(mach), Planner(mach)
        for launch in low.launches:
            table = getattr(launch.projection, "__self__", None)
            if type(table) is RequirementsTable:
                tables += 1
                assert table.colors is launch.colors
                assert list(table) == list(launch.colors)
                assert all(isinstance(r, RegionRequirement)
                           for reqs in table.values() for r in reqs)
                want, named = _walk_regions(launch), table.regions
                assert {id(r) for r in named} == {id(r) for r in want}, launch.name
                first = list(dict(zip(map(id, named), named)).values())   # (repeats known)
                assert all(map(lambda p, q: p is q, first, want)), launch.name
                skipped_first += launch.name == "skewed/fwd"
            assert expand(via, launch) == expand_walk(walked, launch)
            assert [(n, id(r)) for n, r in via.regions.items()] == \
                [(n, id(r)) for n, r in walked.regions.items()], launch.name
    assert skipped_first == 1 and tables > 500, (skipped_first, tables)
