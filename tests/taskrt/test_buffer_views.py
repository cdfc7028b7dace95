"""Views instead of copies (taskrt.liveness.alias_sources, Buffer.alias): a task's output that
is a contiguous view of a buffer it read becomes the written buffer's storage, only where
nothing writes either buffer afterwards, and the viewed storage never goes back to the free
list while the view may be read. Each clobbering test fails when its half of the rule is
left out (the later-writer checks in alias_sources, the `lent` flag in Buffer.alias)."""
import torch

from taskrt import R, RED, RW, WD, IndexLaunch, LocalExecutor, Machine, Region, \
    RegionRequirement, plan
from taskrt.liveness import alias_sources

M1 = Machine.local(1)
X = torch.arange(12.).reshape(3, 4)


def single(name, task, *reqs):
    return IndexLaunch(name, task, (1,), lambda c: [RegionRequirement(*r) for r in reqs],
                       devices=[0])


def storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def executor(launches, initial, keep="all"):
    ex = LocalExecutor(plan(launches, M1, initial=initial), keep=keep)
    ex.write("x", X)
    return ex


def make(ctx, xv, av):
    av.copy_(xv * 2)                      # in place: `a` keeps its own storage


def test_a_view_of_a_buffer_nothing_writes_later_is_kept_as_a_view():
    x, a, b, c = Region("x", (3, 4)), Region("a", (3, 4)), Region("b", (4, 3)), \
        Region("c", (4, 3))
    ex = executor([single("make", make, (x, x.rect, R), (a, a.rect, WD)),
                   single("view", lambda ctx, av, bv: av.reshape(4, 3), (a, a.rect, R),
                          (b, b.rect, WD)),
                   single("use", lambda ctx, bv, cv: bv + 1, (b, b.rect, R),
                          (c, c.rect, WD))], {x: [(x.rect, 0)]})
    for _ in range(2):
        ex.run()
        assert storage(ex.store.instances["b", 0].tensor) == \
            storage(ex.store.instances["a", 0].tensor)                     # no copy
        assert torch.equal(ex.read("c"), (X * 2).reshape(4, 3) + 1)


def test_a_later_writer_of_the_viewed_buffer_gets_a_copy():
    x, a, b, c = Region("x", (3, 4)), Region("a", (3, 4)), Region("b", (3, 4)), \
        Region("c", (3, 4))

    def clobber(ctx, av):
        av.add_(100)
    launches = [single("make", make, (x, x.rect, R), (a, a.rect, WD)),
                single("view", lambda ctx, av, bv: av[:], (a, a.rect, R), (b, b.rect, WD)),
                single("clobber", clobber, (a, a.rect, RW)),
                single("use", lambda ctx, bv, cv: bv + 1, (b, b.rect, R), (c, c.rect, WD))]
    ex = executor(launches, {x: [(x.rect, 0)]})
    ex.run()
    assert torch.equal(ex.read("c"), X * 2 + 1)
    assert 1 not in alias_sources(ex.graph)           # a is written after "view" (node 1)


def test_a_later_accumulation_into_the_view_gets_a_copy():
    """A second Red+ contribution adds into the written buffer in place: had it been a view,
    the sum would land in the buffer read afterwards."""
    x, a, s, c = Region("x", (3, 4)), Region("a", (3, 4)), Region("s", (3, 4)), \
        Region("c", (3, 4))
    launches = [single("make", make, (x, x.rect, R), (a, a.rect, WD)),
                single("first", lambda ctx, av, sv: av[:], (a, a.rect, R), (s, s.rect, RED)),
                single("second", lambda ctx, xv, sv: xv + 1, (x, x.rect, R),
                       (s, s.rect, RED)),
                single("use", lambda ctx, av, cv: av + 0, (a, a.rect, R), (c, c.rect, WD))]
    ex = executor(launches, {x: [(x.rect, 0)]})
    ex.run()
    assert torch.equal(ex.read("c"), X * 2)
    assert torch.equal(ex.read("s"), X * 3 + 1)
    assert 1 not in alias_sources(ex.graph)           # s has two writers ("first": node 1)


def test_a_viewed_temporary_is_not_reused_after_its_release():
    """`a` is released after its last user ("view"), while `b` still views its storage; the
    next temporary of the same size ("d") must get other memory."""
    x, a, b, c, d, e, out = (Region(n, s) for n, s in (
        ("x", (3, 4)), ("a", (3, 4)), ("b", (4, 3)), ("c", (4, 3)), ("d", (3, 4)),
        ("e", (3, 4)), ("out", (3, 4))))
    seen = {}

    def view(ctx, av, bv):
        seen["a"] = storage(av)
        return av.reshape(4, 3)

    def fill(ctx, xv, dv):
        dv.fill_(-1)

    def use(ctx, bv, cv):
        seen["b"] = storage(bv)
        return bv + 0
    launches = [single("make", make, (x, x.rect, R), (a, a.rect, WD)),
                single("view", view, (a, a.rect, R), (b, b.rect, WD)),
                single("fill", fill, (x, x.rect, R), (d, d.rect, WD)),
                single("use", use, (b, b.rect, R), (c, c.rect, WD)),
                single("used", lambda ctx, dv, ev: dv + 0, (d, d.rect, R), (e, e.rect, WD)),
                single("final", lambda ctx, cv, ev, o: cv.reshape(3, 4) + ev,
                       (c, c.rect, R), (e, e.rect, R), (out, out.rect, WD))]
    ex = executor(launches, {x: [(x.rect, 0)]}, keep=None)
    store = ex.store
    assert all(store.instances[n, 0].temporary for n in "abd")
    for _ in range(3):
        ex.run()
        assert seen["a"] == seen["b"]                                   # b viewed a
        assert torch.equal(ex.read("c"), (X * 2).reshape(4, 3))
        assert torch.equal(ex.read("out"), X * 2 - 1)
