"""The cost model: measured profiles of real graphs (backward and integer-input nodes too),
profile files (round trips, merges, corrupt files), analytic FLOPs and bytes against closed
forms, calibration recovering known parameters, the once-per-process fallback warning, and
the cache the simulator relies on."""
import dataclasses
import io
import json
import math
import warnings

import msgpack
import numpy as np
import pytest

from parallel_ops import Adam, Model, ParallelConfig, SGD
from parallel_ops.lowering import lower
from strategy import costs
from strategy.costs import (Calibration, CalibrationError, CostModel, CostWarning, Measurement,
                            Profile, ProfileError, Work, analytic_time, calibrate, gpu_kind,
                            measure_node, node_bytes, node_flops, profile_graph)
from strategy.costs import __main__ as costs_cli
from strategy.costs import load_app, profile_app
from strategy.costs.analytic import spec_numbers
from strategy.costs.model import reset_warning
from strategy.machine_model import DEVICE_SPECS, DeviceSpec
from taskrt import Machine, plan

P = ParallelConfig.of


def Spec(kind="testgpu", fp32=10e12, fp16=40e12, fp64=5e12, bandwidth=500e9,
         launch=5e-6):
    """A DeviceSpec (positional: its field names are the machine model's business)."""
    return DeviceSpec(kind, fp32, fp16, fp64, bandwidth, 16 << 30, launch)


CPU = Spec("cpu", 50e9, 50e9, 25e9, 10e9, 1e-6)


def graph_of(model, strategy, devices=2, optimizer=None):
    machine = Machine.local(devices)
    low = lower(model, strategy, machine, optimizer or SGD(lr=0.1, momentum=0.9))
    return plan(low.launches, machine, initial=low.initial)


def tagger(n=4, t=3, vocab=11, dim=6, classes=5):
    """Embedding (int64 ids), a linear layer, and the loss (int64 labels)."""
    m = Model("tagger", seed=0)
    idx = m.input("idx", (n, t), dtype="int64")
    y = m.input("y", (n, t), dtype="int64")
    e = m.embedding(idx, vocab, dim, name="emb")
    m.softmax_cross_entropy(m.linear(e, classes, name="fc"), y, name="loss")
    return m


def tiny_cnn():
    m = Model("cnn", seed=0)
    x = m.input("x", (4, 3, 8, 8))
    y = m.input("y", (4,), dtype="int64")
    h = m.relu(m.conv2d(x, 4, 3, padding=1, name="conv"), name="act")
    h = m.flat(m.max_pool2d(h, 2, name="pool"), name="flat")
    m.softmax_cross_entropy(m.linear(h, 3, name="fc"), y, name="loss")
    return m


TAGGER_STRATEGY = {"emb": P([0, 1], v=2), "fc": P([0, 1], o=2), "loss": P([0, 1], c=2)}


@pytest.fixture(autouse=True)
def _fresh_warning():
    reset_warning()
    yield
    reset_warning()


@pytest.fixture(scope="module")
def tagger_profile():
    g = graph_of(tagger(), TAGGER_STRATEGY)
    return g, profile_graph(g, "cpu", repeats=2, warmup=1)


# -- measured -----------------------------------------------------------------------------------
def test_profile_measures_every_task_node(tagger_profile):
    g, prof = tagger_profile
    assert not prof.failures
    keys = {n.cost_key for n in g.tasks()}
    assert set(prof.keys("cpu")) == keys and len(prof.work) == len(keys)
    phases = {n.launch.cost_tag[-1] for n in g.tasks()}
    assert {"fwd", "bwd", "update"} <= phases
    types = {n.launch.cost_tag[0] for n in g.tasks()}
    assert {"embedding", "softmax_ce.loss", "linear"} <= types     # integer inputs ran
    cm = CostModel(prof)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                              # nothing missing
        for n in g.tasks():
            t = cm.task_time(n, CPU)
            assert t > 0 and t == prof.get(n.cost_key, "cpu").seconds
            assert cm.explain(n, CPU).source == "measured"


def test_cnn_profile_and_backward_without_graph():
    m = tiny_cnn()
    g = graph_of(m, {"conv": P([0, 1], h=2), "fc": P([0, 1], i=2)})
    prof = profile_graph(g, "cpu", repeats=1, warmup=0)
    assert not prof.failures and len(prof) == len({n.cost_key for n in g.tasks()})
    bwd = next(n for n in g.tasks() if n.launch.name == "conv/bwd")
    # Without the graph, a backward node's forward is rebuilt from its StageArgs.
    assert measure_node(bwd, "cpu", repeats=1, warmup=0).seconds > 0
    assert node_flops(bwd) == node_flops(bwd, g) > 0


def test_adam_update_is_profiled_at_a_steady_step_and_count_restored():
    opt = Adam(lr=0.01)
    g = graph_of(tagger(), {}, devices=1, optimizer=opt)
    prof = profile_graph(g, "cpu", repeats=1, warmup=0)
    assert not prof.failures
    assert any(k[0] == ("adam", "update") for k in prof.keys("cpu"))
    assert opt.step_count == 0


def test_failing_node_does_not_stop_the_profile(monkeypatch):
    g = graph_of(tagger(), {}, devices=1)
    import strategy.costs.profiler as profiler
    real = profiler.measure_node

    def flaky(node, *a, **k):
        if node.launch.name == "fc/fwd":
            raise RuntimeError("boom")
        return real(node, *a, **k)
    monkeypatch.setattr(profiler, "measure_node", flaky)
    with pytest.warns(costs.ProfileWarning, match="1 of .* cost keys could not be measured"):
        prof = profile_graph(g, "cpu", repeats=1, warmup=0)
    assert len(prof.failures) == 1 and "boom" in next(iter(prof.failures.values()))
    assert len(prof) == len({n.cost_key for n in g.tasks()}) - 1


# -- files ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["p.profile", "p.json"])
def test_round_trip(tmp_path, tagger_profile, name):
    _, prof = tagger_profile
    path = tmp_path / name
    prof.save(path)
    back = Profile.load(path)
    assert back.times == prof.times and back.work == prof.work
    assert back.meta["runs"][0]["kind"] == "cpu"
    if name.endswith(".json"):
        assert json.loads(path.read_text())["format"] == "soapflow-profile"
    else:
        assert msgpack.unpackb(path.read_bytes())["version"] == 1


def test_merge_adds_kinds_and_newer_wins(tmp_path, tagger_profile):
    _, prof = tagger_profile
    path = tmp_path / "p.profile"
    prof.save(path)
    key = next(iter(prof.work))
    other = Profile()
    other.add(key, "H200", Measurement(1e-5, 3, 9e-6, 2e-5), Work(1.0, 2))
    other.add(key, "cpu", Measurement(0.5, 1, 0.5, 0.5))
    other.save(path, merge=True)
    back = Profile.load(path)
    assert back.kinds() == ["H200", "cpu"]
    assert back.get(key, "H200").seconds == 1e-5 and back.get(key, "cpu").seconds == 0.5
    assert len(back.keys("cpu")) == len(prof.keys("cpu"))


def test_corrupt_files_name_the_file(tmp_path, tagger_profile):
    _, prof = tagger_profile
    good = tmp_path / "good.profile"
    prof.save(good)
    data = good.read_bytes()
    cases = {"truncated.profile": data[: len(data) // 2], "empty.profile": b"",
             "garbage.profile": b"\xc1\xc1\xc1 not msgpack",
             "pickle.profile": b"\x80\x04\x95\x00"}
    for name, content in cases.items():
        p = tmp_path / name
        p.write_bytes(content)
        with pytest.raises(ProfileError, match=name.replace(".", r"\.")):
            Profile.load(p)
    other = tmp_path / "strategy.profile"
    other.write_bytes(msgpack.packb({"format": "soapflow-strategy", "version": 1}))
    with pytest.raises(ProfileError, match="not a soapflow profile"):
        Profile.load(other)
    newer = tmp_path / "newer.profile"
    newer.write_bytes(msgpack.packb({"format": "soapflow-profile", "version": 99}))
    with pytest.raises(ProfileError, match="version 99 is not supported"):
        Profile.load(newer)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "soapflow-profile", "version": 1,
                               "times": [["key-without-fields"]]}))
    with pytest.raises(ProfileError, match="bad.json: malformed profile entry"):
        Profile.load(bad)
    with pytest.raises(ProfileError, match="missing.profile: cannot read"):
        Profile.load(tmp_path / "missing.profile")


def test_unstorable_key_is_refused_on_save(tmp_path):
    p = Profile()
    p.add((("op", object()), ()), "cpu", Measurement(1.0))
    with pytest.raises(ProfileError, match="cannot be stored in a profile"):
        p.save(tmp_path / "x.profile")


def test_gpu_kinds():
    assert gpu_kind("NVIDIA H200") == "H200"
    assert gpu_kind("Tesla P100-SXM2-16GB") == "P100"
    assert gpu_kind("NVIDIA A100-SXM4-80GB") == "A100"
    assert gpu_kind("Tesla K80") == "K80"
    assert gpu_kind("NVIDIA GeForce RTX 4090") == "NVIDIAGeForceRTX4090"
    assert costs.device_kind("cpu") == "cpu"


# -- analytic: work -------------------------------------------------------------------------------
def _mlp(n, i, o, input_grad):
    m = Model("mlp", seed=0)
    x = m.input("x", (n, i), requires_grad=input_grad)
    y = m.input("y", (n,), dtype="int64")
    m.softmax_cross_entropy(m.linear(x, o, name="fc"), y, name="loss")
    return m


@pytest.mark.parametrize("input_grad", [False, True])
def test_linear_flops_closed_form(input_grad):
    n, i, o = 8, 12, 10
    g = graph_of(_mlp(n, i, o, input_grad), {"fc": P([0, 1], o=2)})
    fwd = next(t for t in g.tasks() if t.launch.name == "fc/fwd")
    bwd = next(t for t in g.tasks() if t.launch.name == "fc/bwd")
    part_o = o // 2
    assert node_flops(fwd) == 2 * n * i * part_o
    # backward: the weight gradient, plus the input gradient when it is wanted
    assert node_flops(bwd) == (2 if input_grad else 1) * 2 * n * i * part_o
    assert node_bytes(fwd) == 4 * (n * i + part_o * i + part_o + n * part_o)


def test_conv_flops_closed_form():
    m = tiny_cnn()
    g = graph_of(m, {"conv": P([0, 1], c=2)})
    fwd = next(t for t in g.tasks() if t.launch.name == "conv/fwd")
    n, cin, h, w, cout, k = 4, 3, 8, 8, 2, 3
    assert node_flops(fwd) == 2 * n * cout * h * w * cin * k * k
    bwd = next(t for t in g.tasks() if t.launch.name == "conv/bwd")
    assert node_flops(bwd) == 2 * n * cout * h * w * cin * k * k     # weight grad only
    reqs = {r.region.name: r for r in fwd.requirements}
    assert node_bytes(fwd) == sum(4 * math.prod(r.rect.shape) for r in reqs.values())
    assert reqs["conv"].rect.shape == (n, cout, h, w)


def test_elementwise_and_updates_are_memory_bound():
    g = graph_of(tiny_cnn(), {})
    for name in ("act/fwd", "conv.weight/update"):
        node = next(t for t in g.tasks() if t.launch.name == name)
        assert node_flops(node) == 0
        cm = CostModel()
        with pytest.warns(CostWarning):
            t = cm.task_time(node, Spec())
        peak, bw, _ = spec_numbers(Spec())
        cal = cm.calibration(Spec())
        kernels = cm.work(node).kernels
        assert kernels >= 1
        assert t == pytest.approx(cal.overhead + kernels * cal.kernel_overhead
                                  + node_bytes(node) / (bw * cal.mem_eff))
        reset_warning()


# -- analytic: model and calibration --------------------------------------------------------------
def synthetic_profile(cal: Calibration, spec, n=60, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    prof = Profile()
    peak, bw, _ = spec_numbers(spec)
    for k in range(n):
        flops = 0.0 if k % 5 == 0 else float(10 ** rng.uniform(5, 12))
        work = Work(flops, int(10 ** rng.uniform(3, 9)), int(rng.integers(0, 30)))
        key = (("op", k), (("R", (k,), "float32"),))
        t = analytic_time(work, peak, bw, cal) * math.exp(noise * rng.normal())
        prof.add(key, spec.kind, Measurement(t), work)
    return prof


def test_efficiency_curve():
    spec = Spec()
    cal = Calibration(spec.kind, 0.0, 0.0, 0.8, 1e9, 1e6)     # memory never binds
    peak = spec.peak_flops()
    for s in (1e7, 1e9, 1e11):
        eff = s / (peak * analytic_time(Work(s, 0), peak, 1.0, cal))
        assert eff == pytest.approx(0.8 * s / (s + 1e9))


@pytest.mark.parametrize("noise", [0.0, 0.05])
def test_calibration_recovers_known_parameters(noise):
    spec = Spec()
    true = Calibration(spec.kind, 12e-6, 4e-6, 0.62, 3e8, 0.71)
    fit = calibrate(synthetic_profile(true, spec, noise=noise), spec)
    tol = 0.02 if noise == 0 else 0.15
    assert fit.points == 60 and fit.calibrated
    for name in ("overhead", "kernel_overhead", "eff_max", "s_half", "mem_eff"):
        assert getattr(fit, name) == pytest.approx(getattr(true, name), rel=tol), name
    assert fit.rms_log_error < (1e-3 if noise == 0 else 0.08)


def test_calibration_needs_enough_points():
    prof = synthetic_profile(Calibration("testgpu", 1e-5, 5e-6, 0.5, 1e8, 0.5), Spec(), n=3)
    with pytest.raises(CalibrationError, match="3 usable measurement"):
        calibrate(prof, Spec())


def test_a_profile_calibrates_the_model_of_its_kind():
    spec = Spec()
    true = Calibration(spec.kind, 20e-6, 6e-6, 0.55, 5e8, 0.6)
    prof = synthetic_profile(true, spec)
    g = graph_of(_mlp(64, 256, 512, True), {})
    node = next(t for t in g.tasks() if t.launch.name == "fc/fwd")
    cm = CostModel(prof)                     # the node's key is not measured: calibrated
    with pytest.warns(CostWarning):
        t = cm.task_time(node, spec)
    peak, bw, _ = spec_numbers(spec)
    assert t == pytest.approx(analytic_time(cm.work(node), peak, bw, true), rel=0.02)
    e = cm.explain(node, spec)
    assert e.source == "calibrated" and "fitted to 60" in e.detail
    p100 = DEVICE_SPECS["P100"]              # nothing measured on a P100: defaults
    e = cm.explain(node, p100)
    assert e.source == "analytic" and "defaults" in e.detail
    w = cm.work(node)
    assert e.seconds == pytest.approx(10e-6 + w.kernels * 5e-6
                                      + (w.flops + 0.7 * 10.6e12 * 5e-6) / (0.7 * 10.6e12))


# -- the simulator's interface ----------------------------------------------------------------------
class _Machine:
    def __init__(self, spec):
        self.spec = spec

    def device(self, i):
        return self.spec


def test_missing_costs_warn_once_with_the_count(tagger_profile):
    g, prof = tagger_profile
    partial = Profile()
    tasks = g.tasks()
    for n in tasks[:3]:
        partial.add(n.cost_key, "cpu", prof.get(n.cost_key, "cpu"), prof.work[n.cost_key])
    missing = len({n.cost_key for n in tasks}) - len(partial)
    cm = CostModel(partial)
    with pytest.warns(CostWarning, match=f"{missing} cost key\\(s\\) have no measurement on cpu"):
        cm.prepare(g, _Machine(CPU))
    assert len(cm.missing) == missing
    with warnings.catch_warnings():
        warnings.simplefilter("error")       # once per process: a second model stays quiet
        cm2 = CostModel(Profile())
        for n in tasks:
            assert cm2.task_time(n, CPU) > 0
        cm2.prepare(g, _Machine(Spec()))
    assert {cm.explain(n, CPU).source for n in tasks} == {"measured", "analytic"}


def test_an_equal_cost_key_is_a_lookup(tagger_profile):
    g, prof = tagger_profile
    cm = CostModel(prof)
    first = [cm.task_time(n, CPU) for n in g.tasks()]
    calls = []
    real = cm.profile.get
    cm.profile.get = lambda *a: calls.append(a) or real(*a)
    assert [cm.task_time(n, CPU) for n in g.tasks()] == first and calls == []


def test_a_cost_model_keeps_no_task_node():
    """A CostModel outlives the graphs it times (a search's, a benchmark's searches): a node
    kept in it keeps its launch and regions alive. (A per-node cache grew the search_quality
    benchmark's process ~1 GB a cell.) Only `missing` keeps one node per unmeasured key."""
    m = Model("keep", seed=0)
    x = m.input("x", (8, 6))
    m.linear(m.relu(m.linear(x, 6, name="fc1"), name="r"), 3, name="fc2")
    g = graph_of(m, {op.name: P([0, 1], n=2) for op in m.ops})
    tasks = g.tasks()
    cm = CostModel()
    for n in tasks:
        cm.task_time(n, CPU)
    ids = {id(n) for n in tasks}
    kept = [k for name, d in vars(cm).items() if isinstance(d, dict) and name != "missing"
            for k in list(d) + list(d.values())
            if id(k) in ids or (isinstance(k, tuple) and any(id(e) in ids for e in k))]
    assert kept == [], f"the cost model holds task nodes: {kept[:3]}"


# -- profiling an app ---------------------------------------------------------------------------
TINY_RNNLM = ["--small", "--vocab", "16", "--embed", "8", "--hidden", "8", "--seq-len", "2",
              "--layers", "1", "--batch-size", "4"]


@pytest.fixture(scope="module")
def rnnlm_profile(tmp_path_factory):
    path = tmp_path_factory.mktemp("prof") / "rnnlm.profile"
    out = io.StringIO()
    rc = costs_cli.main(["profile", "rnnlm", *TINY_RNNLM, "--devices", "2", "--repeats", "1",
                         "--warmup", "0", "-o", str(path)], out=out)
    assert rc == 0, out.getvalue()
    return path, out.getvalue()


def test_profile_app_covers_every_single_dim_split(rnnlm_profile):
    path, report = rnnlm_profile
    prof = Profile.load(path)
    assert "0 failed" in report and f"{len(prof)} measured on cpu" in report
    net = load_app("rnnlm", TINY_RNNLM, 2)
    opt = net.optimizer
    model, machine = net.model, Machine.local(2)
    for op in model.ops:
        for dim in op.dims:
            for d in range(1, min(2, dim.extent) + 1):
                low = lower(model, {op.name: ParallelConfig(((dim.name, d),), tuple(range(d)))},
                            machine, opt)
                g = plan(low.launches, machine, initial=low.initial)
                missing = {n.launch.name for n in g.tasks()
                           if prof.get(n.cost_key, "cpu") is None}
                assert not missing, (op.name, dim.name, d, missing)


def test_profile_app_skips_what_the_file_has(rnnlm_profile):
    path, _ = rnnlm_profile
    before = Profile.load(path)
    again = profile_app("rnnlm", TINY_RNNLM, devices=2, repeats=1, warmup=0, output=path)
    assert len(again) == 0 and Profile.load(path).times == before.times


def test_show_and_bad_app(rnnlm_profile, capsys):
    path, _ = rnnlm_profile
    out = io.StringIO()
    assert costs_cli.main(["show", str(path), "--top", "2"], out=out) == 0
    assert "cpu:" in out.getvalue() and "slowest" in out.getvalue()
    assert costs_cli.main(["profile", "nope"], out=out) == 2
    assert "error: nope: no such app 'nope'; use alexnet" in capsys.readouterr().err


def test_show_lists_reduction_keys_among_the_slowest(rnnlm_profile, tmp_path):
    """A Red+ requirement's key entry has a fourth field (how its pieces are stored): show
    printed only 3-field entries, so it failed whenever a backward key was among the top."""
    path, _ = rnnlm_profile
    prof = Profile.load(path)
    red = [(k, d) for k, d in prof.times if any(len(req) == 4 for req in k[1])]
    assert red                                                          # (not vacuous)
    for k in red:                             # the slowest, whatever this run measured
        prof.times[k] = dataclasses.replace(prof.times[k], seconds=10.0)
    slow = tmp_path / "slow.profile"
    prof.save(slow)
    out = io.StringIO()
    assert costs_cli.main(["show", str(slow), "--top", "2"], out=out) == 0
    assert "1e+04 ms" in out.getvalue()


@pytest.mark.parametrize("entry", [[["k"], "X", -1.0, 3, 0.0, 0.0],
                                   [["k"], "X", float("nan"), 3, 0.0, 0.0],
                                   [["k"], "X", 1.0, 3, 1.0, float("inf")]])
def test_profile_refuses_negative_or_non_finite_times(entry):
    from strategy.costs.profile import FORMAT, VERSION
    with pytest.raises(ProfileError, match=r"times entry 0 \('k' on X\).*finite and not negative"):
        Profile.from_dict({"format": FORMAT, "version": VERSION, "times": [entry]}, "p.json")


def test_flop_counter_totals_as_torch_flop_counter_mode():
    """work.Counter (no torch._dynamo import) gives FlopCounterMode's totals on every task
    kind of the apps' operators: matmuls, convolutions, attention, LSTM steps, losses."""
    from torch.utils.flop_counter import FlopCounterMode
    from strategy.costs import work
    from strategy.costs.parts import SteadyStep, node_steps

    def torch_flops(node, graph):
        fwd, step = node_steps(node, "meta", graph, None)
        counter = FlopCounterMode(display=False)
        if fwd is not None:
            fwd()
        with SteadyStep(node), counter:
            step()
        return counter.get_total_flops()

    models = [tiny_cnn(), _mlp(8, 12, 10, True)]
    for name in ("transformer", "nmt"):
        net = load_app(name, ["--small", "--batch-size", "4"], devices=2)
        models.append(net.model)
    checked = 0
    for model in models:
        graph = graph_of(model, {})
        seen = set()
        for node in graph.tasks():
            if node.cost_key in seen:
                continue
            seen.add(node.cost_key)
            ours = work._counts(node, graph, None)[0]
            assert ours == torch_flops(node, graph), node.describe()
            checked += ours > 0
    assert checked >= 10
