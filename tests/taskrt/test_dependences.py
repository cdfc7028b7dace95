"""Table-driven dependence rules: privilege pair x geometry x placement -> edge, path or none.

Semantics (taskrt/planner.py's docstring): dependences are tracked per physical instance, so
  - tasks on one device are connected by a direct edge when they touch overlapping rects of
    the same buffer (RAW, WAR, WAW on the instance; two Red+ on its partial-sum buffer, kept in
    program order so sums are bit-identical);
  - a Red+ task writes only the partial-sum buffer: it has no edge to readers/writers of the
    instance; a later read reaches it through a ReduceNode ("path");
  - tasks on different devices are never connected directly, only through copy or reduction
    nodes planned for the second task's reads ("path"), and not at all when the second task
    does not read (it writes its own instance);
  - no dependence at all between readers, or between touching or disjoint rects.
Before the first launch the whole region is valid on both devices 0 and 1 (initial data), so
every dependence in the table comes from the first task.
"""
import pytest

from taskrt import R, RED, RW, WD, Machine, Rect, Region, plan

from taskrt_helpers import ancestors, descendants, one, task_of

E, P, N = "edge", "path", "-"

#                 same device                      different devices
#      first second  overlap touching disjoint       overlap touching disjoint
TABLE = [
    (R,   R,         N,      N,       N,             N,      N,       N),
    (R,   WD,        E,      N,       N,             N,      N,       N),
    (R,   RW,        E,      N,       N,             N,      N,       N),
    (R,   RED,       N,      N,       N,             N,      N,       N),
    (WD,  R,         E,      N,       N,             P,      N,       N),
    (WD,  WD,        E,      N,       N,             N,      N,       N),
    (WD,  RW,        E,      N,       N,             P,      N,       N),
    (WD,  RED,       N,      N,       N,             N,      N,       N),
    (RW,  R,         E,      N,       N,             P,      N,       N),
    (RW,  WD,        E,      N,       N,             N,      N,       N),
    (RW,  RW,        E,      N,       N,             P,      N,       N),
    (RW,  RED,       N,      N,       N,             N,      N,       N),
    (RED, R,         P,      N,       N,             P,      N,       N),
    (RED, WD,        N,      N,       N,             N,      N,       N),
    (RED, RW,        P,      N,       N,             P,      N,       N),
    (RED, RED,       E,      N,       N,             N,      N,       N),
]
GEOMETRIES = ("overlap", "touching", "disjoint")

# (first rect, second rect) per geometry, in 1-d and in 2-d (2-d touching shares an edge).
RECTS = {
    1: {"overlap": (Rect.of((0, 4)), Rect.of((2, 6))),
        "touching": (Rect.of((0, 4)), Rect.of((4, 8))),
        "disjoint": (Rect.of((0, 2)), Rect.of((5, 8)))},
    2: {"overlap": (Rect.of((0, 4), (0, 4)), Rect.of((2, 6), (3, 8))),
        "touching": (Rect.of((0, 4), (0, 4)), Rect.of((0, 4), (4, 8))),
        "disjoint": (Rect.of((0, 2), (0, 2)), Rect.of((5, 8), (5, 8)))},
}


def cases():
    for row in TABLE:
        first, second, *expected = row
        for k, (same, geo) in enumerate((s, g) for s in (True, False) for g in GEOMETRIES):
            for ndim in (1, 2):
                yield pytest.param(first, second, geo, same, ndim, expected[k],
                                   id=f"{first.value}-{second.value}-{geo}-"
                                      f"{'same' if same else 'diff'}-{ndim}d")


def test_table_is_complete():
    assert len(TABLE) == 16
    assert {(a, b) for a, b, *_ in TABLE} == {(a, b) for a in (R, WD, RW, RED)
                                             for b in (R, WD, RW, RED)}


@pytest.mark.parametrize("first,second,geo,same,ndim,expected", list(cases()))
def test_dependence(first, second, geo, same, ndim, expected):
    region = Region("x", (8,) * ndim)
    a, b = RECTS[ndim][geo]
    machine = Machine.local(2)
    initial = {region: [(region.rect, 0), (region.rect, 1)]}
    g = plan([one("first", region, a, first, 0),
              one("second", region, b, second, 0 if same else 1)], machine, initial=initial)
    t1, t2 = task_of(g, "first"), task_of(g, "second")
    direct = t1.id in g.preds[t2.id]
    reachable = t1.id in ancestors(g, t2.id)
    got = E if direct else (P if reachable else N)
    assert got == expected, "\n" + g.dump()
    if got == P:
        # Only copy / reduction nodes (planned for the second task's reads) lie in between.
        between = descendants(g, t1.id) & ancestors(g, t2.id)
        assert between and all(g.nodes[i].kind in ("copy", "reduce", "allreduce")
                               and g.nodes[i].owner == "second" for i in between)
    if not same:
        # Tasks on different devices never share an edge.
        assert not direct
    if geo != "overlap":
        # Nothing at all is planned between touching or disjoint accesses.
        assert [n.kind for n in g.nodes] == ["task", "task"]
