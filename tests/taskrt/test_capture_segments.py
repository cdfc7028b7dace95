"""How CUDA-graph capture cuts a plan (taskrt.executor.capture.split), on hand-built graphs:
a task whose function names a capture_hazard runs eagerly, and so does every task paired
with it by saved state (along chains of state_from), while the rest is captured; a node on
two physical devices is eager; segments cover the plan in order. And the whole executor
with the checking replay (TASKRT_CUDA_GRAPHS=2): state passed between captured tasks,
copies between logical devices and new inputs every run give eager's values."""
import pytest
import torch

from taskrt import R, RW, WD, IndexLaunch, LocalExecutor, Machine, Region, RegionRequirement, plan
from taskrt.executor.capture import CheckedReplay, split

M2 = Machine.local(2)


def single(name, task, device, *reqs, **kw):
    return IndexLaunch(name, task, (1,), lambda c: [RegionRequirement(*r) for r in reqs],
                       devices=[device], **kw)


def keep_state(ctx, xv, yv):
    ctx.saved = xv * 3                       # a tensor made in the task: Python-held state
    return xv + 1


def use_state(ctx, yv, zv):
    return yv * ctx.take_state()


def hazardous(ctx, xv):
    xv.add_(1)


hazardous.capture_hazard = lambda args, color: "reads a host counter"


def launches(hazard_in_pair: bool):
    x, y, z = Region("x", (4,)), Region("y", (4,)), Region("z", (4,))
    first = keep_state
    if hazard_in_pair:
        def first(ctx, xv, yv):              # noqa: F811 (the same task, with a hazard)
            return keep_state(ctx, xv, yv)
        first.capture_hazard = hazardous.capture_hazard
    out = [single("bump", hazardous, 0, (x, x.rect, RW)),
           single("fwd", first, 0, (x, x.rect, R), (y, y.rect, WD)),
           single("move", lambda ctx, yv: None, 1, (y, y.rect, R)),     # a copy to device 1
           single("bwd", use_state, 0, (y, y.rect, R), (z, z.rect, WD), state_from="fwd")]
    return out, {x: [(x.rect, 0)]}


def graph(hazard_in_pair):
    ls, initial = launches(hazard_in_pair)
    return plan(ls, M2, initial=initial)


def eager_launches(g, segments, entries):
    return {g.nodes[i].launch.name for s in segments if s.device is None
            for k in range(s.start, s.stop) for i in entries[k] if g.nodes[i].kind == "task"}


def test_a_hazard_and_its_state_pair_run_eagerly():
    for hazard_in_pair, want in ((False, {"bump"}), (True, {"bump", "fwd", "bwd"})):
        g = graph(hazard_in_pair)
        ex = LocalExecutor(g)
        segs = split(g, ex.entries, ex.store.torch_device, CheckedReplay())
        assert eager_launches(g, segs, ex.entries) == want
        assert segs[0].start == 0 and segs[-1].stop == len(ex.entries)
        assert all(a.stop == b.start for a, b in zip(segs, segs[1:]))
        if hazard_in_pair:
            assert any("takes saved state" in (s.reason or "") for s in segs)


def test_a_node_on_two_physical_devices_runs_eagerly():
    g = graph(False)
    ex = LocalExecutor(g)
    copies = [k for k, ids in enumerate(ex.entries) if g.nodes[ids[0]].kind == "copy"]
    assert copies
    segs = split(g, ex.entries, {0: "cpu", 1: "meta"}, CheckedReplay())  # two "devices"
    for k in copies:
        seg = next(s for s in segs if s.start <= k < s.stop)
        assert seg.device is None and "spans devices" in seg.reason


@pytest.mark.parametrize("hazard_in_pair", [False, True])
def test_captured_runs_equal_eager_with_new_inputs(hazard_in_pair, monkeypatch):
    results = {}
    for mode in ("0", "2"):
        monkeypatch.setenv("TASKRT_CUDA_GRAPHS", mode)
        ex = LocalExecutor(graph(hazard_in_pair))
        got = []
        for step in range(5):
            ex.write("x", torch.arange(4.) * (step + 1))
            ex.run()
            got.append((ex.read("x"), ex.read("y"), ex.read("z")))
        results[mode] = got
        assert (ex.capture is None) == (mode == "0")
    assert ex.capture.captured() >= 1 and ex.capture.backend.replays >= 3
    for step, (a, b) in enumerate(zip(results["0"], results["2"])):
        for u, v in zip(a, b):
            assert torch.equal(u, v), f"step {step}"
