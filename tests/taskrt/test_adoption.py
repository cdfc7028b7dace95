"""Adoption (taskrt.executor.instances.Buffer.adopt): a task's output covering a whole buffer
becomes its storage instead of being copied in, and only when that is safe: never an alias
of another buffer, never one tensor for two buffers, never a strided or partial view, and
an adopted storage never goes back to the free list (autograd may still hold it)."""
import torch

from taskrt import R, RED, WD, IndexLaunch, LocalExecutor, Machine, Region, RegionRequirement, plan

M1 = Machine.local(1)


def single(name, task, *reqs):
    return IndexLaunch(name, task, (1,), lambda c: [RegionRequirement(*r) for r in reqs],
                       devices=[0])


def storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def run(launches, initial, keep="all", x=None):
    ex = LocalExecutor(plan(launches, M1, initial=initial), keep=keep)
    ex.write("x", x if x is not None else torch.arange(12.).reshape(3, 4))
    ex.run()
    return ex


def test_fresh_output_becomes_the_instance_and_readers_see_it():
    x, y, z = Region("x", (3, 4)), Region("y", (3, 4)), Region("z", (3, 4))
    returned = []

    def double(ctx, xv, yv):
        returned.append(xv * 2)
        return returned[-1]
    ex = run([single("double", double, (x, x.rect, R), (y, y.rect, WD)),
              single("inc", lambda ctx, yv, zv: yv + 1, (y, y.rect, R), (z, z.rect, WD))],
             {x: [(x.rect, 0)]})
    y_buf = ex.store.instances["y", 0]
    assert storage(y_buf.tensor) == storage(returned[-1])          # adopted: no copy
    assert torch.equal(ex.read("z"), torch.arange(12.).reshape(3, 4) * 2 + 1)
    ex.write("x", torch.ones(3, 4))
    ex.run()                                                         # next iteration adopts anew
    assert storage(y_buf.tensor) == storage(returned[-1])
    assert torch.equal(ex.read("z"), torch.full((3, 4), 3.))


def test_an_alias_of_another_buffer_is_copied_not_shared():
    x, y = Region("x", (3, 4)), Region("y", (3, 4))
    ex = run([single("same", lambda ctx, xv, yv: xv, (x, x.rect, R), (y, y.rect, WD))],
             {x: [(x.rect, 0)]})
    xs, ys = ex.store.instances["x", 0].tensor, ex.store.instances["y", 0].tensor
    assert storage(xs) != storage(ys)
    ex.write("x", torch.zeros(3, 4))                  # x changes in place; y keeps its value
    assert torch.equal(ex.read("y"), torch.arange(12.).reshape(3, 4))


def test_one_tensor_for_two_buffers_is_adopted_once():
    x, y, z = Region("x", (3, 4)), Region("y", (3, 4)), Region("z", (3, 4))

    def twice(ctx, xv, yv, zv):
        t = xv + 1
        return t, t
    ex = run([single("twice", twice, (x, x.rect, R), (y, y.rect, WD), (z, z.rect, WD))],
             {x: [(x.rect, 0)]})
    ys, zs = ex.store.instances["y", 0].tensor, ex.store.instances["z", 0].tensor
    assert storage(ys) != storage(zs)
    assert torch.equal(ys, zs)


def test_strided_or_partial_values_are_copied():
    x, y, z = Region("x", (3, 4)), Region("y", (4, 3)), Region("z", (3, 2))
    big = []

    def strided(ctx, xv, yv, zv):
        big.append(torch.cat([xv, xv], 1))           # z is a view of half of a larger tensor
        return (xv + 0).t(), big[-1][:, :2]
    ex = run([single("strided", strided, (x, x.rect, R), (y, y.rect, WD), (z, z.rect, WD))],
             {x: [(x.rect, 0)]})
    ys, zs = ex.store.instances["y", 0].tensor, ex.store.instances["z", 0].tensor
    assert ys.is_contiguous() and zs.is_contiguous()
    assert storage(zs) != storage(big[-1])
    xv = torch.arange(12.).reshape(3, 4)
    assert torch.equal(ex.read("y"), xv.t()) and torch.equal(ex.read("z"), xv[:, :2])


def test_an_adopted_temporary_is_not_reused_after_its_release():
    """The output a task still holds (as autograd holds a saved output) must not be handed to
    the next temporary of the same size by the free list."""
    x, y, y2, z, z2, out = (Region(n, (3, 4)) for n in ("x", "y", "y2", "z", "z2", "out"))
    held = []

    def produce(ctx, xv, yv):
        held.append(xv * 10)
        return held[-1]

    def overwrite(ctx, zv, y2v):
        y2v.fill_(-1)                            # in place: returns None for its WD
    launches = [single("produce", produce, (x, x.rect, R), (y, y.rect, WD)),
                single("use", lambda ctx, yv, zv: yv + 1, (y, y.rect, R), (z, z.rect, WD)),
                # y is released after "use": y2 (same size) is allocated next and written
                single("other", overwrite, (z, z.rect, R), (y2, y2.rect, WD)),
                single("last", lambda ctx, y2v, z2v: y2v * 1, (y2, y2.rect, R),
                       (z2, z2.rect, WD)),
                single("final", lambda ctx, z2v, o: z2v + 0, (z2, z2.rect, R),
                       (out, out.rect, WD))]
    ex = run(launches, {x: [(x.rect, 0)]}, keep=["z"])
    assert ex.store.instances["y", 0].temporary and ex.store.instances["y2", 0].temporary
    for _ in range(3):
        ex.run()
        assert torch.equal(held[-1], torch.arange(12.).reshape(3, 4) * 10)
    assert torch.equal(ex.read("out"), torch.full((3, 4), -1.))
    assert torch.equal(ex.read("z"), torch.arange(12.).reshape(3, 4) * 10 + 1)


def test_reduction_contributions_are_adopted_then_accumulated():
    x, s = Region("x", (3, 4)), Region("s", (3, 4))
    first = []

    def part(k):
        def contribute(ctx, xv, sv):
            out = xv * (k + 1)
            if k == 0:
                first.append(out)
            return out
        return contribute
    ex = run([single(f"p{k}", part(k), (x, x.rect, R), (s, s.rect, RED)) for k in range(3)],
             {x: [(x.rect, 0)]})
    assert torch.equal(ex.read("s"), torch.arange(12.).reshape(3, 4) * 6)
    partial = ex.store.instances["s", 0].tensor
    assert storage(partial) == storage(first[-1])             # the first one was adopted
