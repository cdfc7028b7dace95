"""A lowered launch's RequirementsTable columns (taskrt/launch.py, made by
parallel_ops/launch_template.py `_Requirements.make`) and the region classes keyed by them
(taskrt/regionclasses.py `_AlikeSignatures.table_sid`): where a table has columns its points
ask alike, and two tables whose pairs at a position are the same objects ask equal rects and
privileges there point by point; RegionClasses.find gives exactly the classes, signature
ids and last uses it gives without the columns."""
import random

from parallel_ops import SGD, Model, ParallelConfig, lower
from taskrt import Machine, Planner
from taskrt.launch import RequirementsTable
from taskrt.regionclasses import RegionClasses

from test_launch_templates import Skewed, skewed_model


def _cases():
    """(model, strategy, machine): an operator whose first point skips its first input
    (its points do not ask alike), and random configs of Inception (small), twice each
    (other lowerings of the same templates)."""
    from strategy.costs.app_profile import load_app
    from strategy.standard import random_config
    m = skewed_model()
    cases = [(m, {"skewed": ParallelConfig.of(range(4), n=4)}, Machine.grid(4, 1))]
    net = load_app("inception", ["--small"], 16).model
    for seed in range(3):
        rng = random.Random(seed)
        strategy = {op.name: random_config(op, range(16), rng) for op in net.ops}
        cases += [(net, strategy, Machine.grid(4, 4))] * 2
    cases.append((net, {}, Machine.grid(4, 4)))           # (data parallel)
    return cases


def _table(launch):
    table = getattr(launch.projection, "__self__", None)
    return table if type(table) is RequirementsTable else None


def test_columns_promise_what_find_keys_on(monkeypatch):
    import parallel_ops.launch_template as templates
    # (a template cache of its own: one that starts again in the middle, as late in a
    # full test run, would leave few pairs met again)
    monkeypatch.setattr(templates, "_TEMPLATES", {})
    monkeypatch.setattr(templates, "_INTERNED", [])
    monkeypatch.setattr(templates, "_POINTS", [0])
    seen: dict = {}     # (k, id(order), id(parts)) -> (the pair, per point (rect, privilege))
    with_columns = without = positions = 0
    lowerings = []
    for model, strategy, machine in _cases():
        low = lower(model, strategy, machine, SGD(lr=0.1))
        lowerings.append(low)           # (alive: the pairs are compared by identity)
        for launch in low.launches:
            table = _table(launch)
            if table is None:
                continue
            if table.columns is None:
                without += 1
                continue
            with_columns += 1
            rows = list(table.values())
            assert len(table.columns) == len(table.regions)
            assert len({r.name for r in table.regions}) == len(table.regions)
            for k, (pair, region) in enumerate(zip(table.columns, table.regions)):
                positions += 1
                col = [reqs[k] for reqs in rows]
                assert all(len(reqs) == len(table.regions) for reqs in rows)
                assert all(r.region is region for r in col), launch.name
                assert len({r.privilege for r in col}) == 1, launch.name
                asked = [(r.rect, r.privilege) for r in col]
                known = seen.setdefault((k, id(pair[0]), id(pair[1])), (pair, asked))
                assert known[1] == asked, launch.name
    assert with_columns > 100 and without > 0           # (not vacuous: Skewed has none)
    assert 2 * len(seen) < positions                    # (pairs met again, often)


def _found(launches, machine, initial):
    p = Planner(machine, initial, replannable=False)
    expanded = [p._expand(launch) for launch in launches]
    c = RegionClasses.find(p, launches, expanded, 0)
    return (sorted((n, tuple(rc.members), k) for n, (rc, k) in c.of.items()),
            sorted(c._launch_sigs.items()), list(c.last_use.items()))


def test_find_by_columns_equals_find_by_rects():
    for model, strategy, machine in _cases():
        low = lower(model, strategy, machine, SGD(lr=0.1))
        got = _found(low.launches, machine, low.initial)
        for launch in low.launches:
            table = _table(launch)
            if table is not None:
                table.columns = None
        want = _found(low.launches, machine, low.initial)
        assert got == want


def test_find_keys_columns_by_position_parts_devices_and_replicas():
    """Hand-made tables sharing one order object: launches whose pair is the same but
    whose devices or replicas differ, or whose parts differ under the same order, get the
    signature ids find gives by every point's rect."""
    from taskrt import IndexLaunch, Rect
    from taskrt.privilege import R, WD, RegionRequirement
    from taskrt.region import Region

    order = object()
    halves = (Rect((0, 0), (4, 4)), Rect((4, 0), (8, 4)))
    whole = (Rect((0, 0), (8, 4)), Rect((0, 0), (8, 4)))
    cases = [("a", halves, (0, 1), False), ("b", halves, (0, 1), False),
             ("c", whole, (0, 1), False), ("d", halves, (1, 0), False),
             ("e", whole, (0, 1), True), ("f", whole, (0, 1), False)]
    launches, initial = [], {}
    for name, parts, devices, replicas in cases:
        out = Region(f"{name}.out", (8, 4))
        src = Region(f"{name}.in", (8, 4))
        initial[src] = [(Rect((0, 0), (8, 4)), d) for d in range(2)]
        launch = IndexLaunch(name, lambda ctx: None, (2,), None, devices=list(devices),
                             replicas=replicas)
        reqs = [(RegionRequirement(src, parts[i], R),
                 RegionRequirement(out, parts[i], WD)) for i in range(2)]
        table = RequirementsTable(launch.colors, reqs, [src, out],
                                  [(order, parts), (order, parts)])
        launch.projection = table.__getitem__
        launches.append(launch)
    machine = Machine.grid(2, 1)
    got = _found(launches, machine, initial)
    assert len({sids for _, sids in got[1]}) == 4      # (a = b; c, d, e apart; f = c)
    for launch in launches:
        _table(launch).columns = None
    assert got == _found(launches, machine, initial)


def test_a_part_group_of_two_privileges_or_a_region_twice_gives_no_columns():
    """_Requirements.make gives columns only where each group has one privilege and the
    groups' regions are distinct (what by_region_and_alike's check would find)."""
    from parallel_ops.launch_template import Interned, _Requirements
    from parallel_ops.lowering import _Shared
    from parallel_ops.tasks import IN
    from taskrt import Rect
    from taskrt.region import Region

    m = Model("two", seed=0)
    a = m.input("a", (8, 4), requires_grad=True)
    b = m.input("b", (8, 4), requires_grad=True)
    op = m.add_op(Skewed(m, a, b, name="skewed"))
    top, bottom = Rect((0, 0), (4, 4)), Rect((4, 0), (8, 4))
    x, y = Region("x", (8, 4)), Region("y", (8, 4))
    for codes, regions, want in [(("R", "R"), [x, y], True), (("R", "RW"), [x, y], False),
                                 (("R", "R"), [x, x], False)]:
        reqs = _Requirements(op)
        reqs.add_point([(IN, 0, top, codes[0]), (IN, 1, top, "R")])
        reqs.add_point([(IN, 0, bottom, codes[1]), (IN, 1, bottom, "R")])
        reqs.finish(Interned().group)
        assert reqs.by_position
        table = reqs.make(((0,), (1,)), {IN: regions}, _Shared())
        assert (table.columns is not None) == want, (codes, regions)
