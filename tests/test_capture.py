"""CUDA-graph capture (taskrt/executor/capture.py) on the CPU, with the checking replay
(TASKRT_CUDA_GRAPHS=2): it records each segment's aten operations at capture, with the
Python numbers baked in as a CUDA graph bakes them, and replays them on the same tensors,
checking the store's addresses before every replay. Training under capture equals eager
training bit for bit (new inputs every step, capture in step 2, replays after) and plain
PyTorch; a host value that changes per step is run eagerly (without that, the replay shows
the wrong result a GPU would give); a changed shape, a replaced plan, new storage for a
buffer or a host sync inside a segment is a clear error.

With SOAPFLOW_TEST_DEVICE=cuda (tools/gpu_checks.sh) the same tests run on logical devices
of the GPU with real CUDA graphs (TASKRT_CUDA_GRAPHS=1), except the two that only the
checking replay can show (an address check; a host sync, which CUDA reports itself)."""
import copy
import os
import sys

import pytest
import torch

import parallel_ops.attention  # noqa: F401  (attach builders)
import parallel_ops.dropout  # noqa: F401
from parallel_ops import SGD, Adam, Model, ParallelConfig
from parallel_ops.dropout import Dropout
from parallel_ops.tasks import update_task
from taskrt import LocalExecutor, Machine
from taskrt.errors import ExecutionError, PlanError
from taskrt.executor.capture import CheckedReplay, split

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ops"))
from oracle import assert_matches, oracle_machine, random_feeds  # noqa: E402
from test_small_cnn import STRATEGY as CNN_STRATEGY, small_cnn  # noqa: E402

P = ParallelConfig.of
STEPS = 5
ON_GPU = os.environ.get("SOAPFLOW_TEST_DEVICE") == "cuda"
MODE = 1 if ON_GPU else 2                # real CUDA graphs on a GPU, else the checking replay
cpu_only = pytest.mark.skipif(ON_GPU, reason="the checking replay's own check (CPU run)")


def same(a, b) -> bool:
    """Bit for bit on the CPU; on a GPU to float64 rounding (cuDNN may pick kernels that
    sum in another order run to run)."""
    if not ON_GPU or not a.is_floating_point():
        return torch.equal(a, b)
    return torch.allclose(a, b, rtol=1e-9, atol=1e-12)


def mlp(dropout=0.25):
    m = Model("mlp", seed=3, dtype="float64")
    x = m.input("x", (8, 6), requires_grad=True)
    y = m.input("y", (8,), dtype="int64")
    h = m.relu(m.linear(x, 10, name="fc1"), name="relu1")
    if dropout:
        h = m.dropout(h, dropout, name="drop")
    m.softmax_cross_entropy(m.linear(h, 4, name="fc2"), y, name="loss")
    return m


MLP_STRATEGY = {"fc1": P([0, 1, 2, 3], n=2, o=2), "fc2": P([2, 3], i=2), "loss": P([0, 1], n=2)}


def attention():
    m = Model("mha", seed=1, dtype="float64")
    x = m.input("x", (3, 4, 6), requires_grad=True)
    y = m.input("y", (3, 4), dtype="int64")
    a = m.multihead_attention(x, 3, causal=True, name="att")
    m.softmax_cross_entropy(m.linear(a, 4, name="fc"), y, name="loss")
    return m


CASES = {
    "cnn_sgd_momentum": (lambda: small_cnn()[0], CNN_STRATEGY, SGD(lr=0.1, momentum=0.9), 5),
    "mlp_adam_dropout": (mlp, MLP_STRATEGY, Adam(lr=0.01), 4),
    "attention_adam": (attention, {"att": P([0, 1, 2], n=3, h=1)}, Adam(lr=0.01), 4),
}


def train(monkeypatch, mode, build, strategy, optimizer, classes, steps=STEPS):
    """Losses, then per step every region value and weight read back; new feeds per step."""
    monkeypatch.setenv("TASKRT_CUDA_GRAPHS", str(mode))
    m = build()
    trainer = m.compile(oracle_machine(4), strategy, copy.deepcopy(optimizer), keep="all")
    out = []
    for step in range(steps):
        loss = trainer.step(random_feeds(m, 100 + step, classes))
        values = {name: trainer.read(name) for name in trainer.graph.regions
                  if name in trainer.graph.final_valid}
        out.append((loss, values))
    return out, trainer


@pytest.mark.parametrize("case", sorted(CASES))
def test_capture_equals_eager_bit_for_bit(case, monkeypatch):
    build, strategy, opt, classes = CASES[case]
    eager, t0 = train(monkeypatch, 0, build, strategy, opt, classes)
    captured, t2 = train(monkeypatch, MODE, build, strategy, opt, classes)
    assert t0.executor.capture is None
    cap = t2.executor.capture
    assert cap.captured() >= 1 and cap.backend.replays >= (STEPS - 2) * cap.captured()
    assert t2.executor.store.static
    for step, ((l0, v0), (l2, v2)) in enumerate(zip(eager, captured)):
        assert same(torch.tensor(l0), torch.tensor(l2)), \
            f"step {step}: loss {l2} captured, {l0} eager"
        assert v0.keys() == v2.keys()
        for name in v0:
            assert same(v0[name], v2[name]), f"step {step}: {name} differs"


@pytest.mark.parametrize("case", ["cnn_sgd_momentum", "attention_adam"])
def test_capture_equals_pytorch(case, monkeypatch):
    build, strategy, opt, _ = CASES[case]
    monkeypatch.setenv("TASKRT_CUDA_GRAPHS", str(MODE))
    assert_matches(build(), random_feeds(build(), 4, 4), strategy, optimizer=opt, steps=4)


def test_imported_gpt2_with_capture_equals_eager_pytorch(monkeypatch):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "importer"))
    from hf_models import HF_MODELS, torch_steps, transformers
    if transformers is None:
        pytest.skip("transformers is not installed")
    from parallel_ops.importer import import_module
    build, strategies = HF_MODELS["gpt2"]
    net, inputs = build()
    opt = SGD(lr=0.1, momentum=0.9)
    want, _ = torch_steps(net, inputs, copy.deepcopy(opt), 4)
    monkeypatch.setenv("TASKRT_CUDA_GRAPHS", str(MODE))
    imp = import_module(net, inputs, method="export")
    trainer = imp.model.compile(oracle_machine(3), strategies(3)["mixed"], copy.deepcopy(opt))
    losses = [trainer.step(imp.feeds(**inputs)) for _ in range(4)]
    assert trainer.executor.capture.backend.replays > 0
    assert losses == pytest.approx(want, rel=1e-6)


# -- what must run eagerly, and what the checking replay shows when it does not -------------
def test_dropout_and_updates_run_eagerly_with_their_pairs(monkeypatch):
    monkeypatch.setenv("TASKRT_CUDA_GRAPHS", str(MODE))
    trainer = mlp().compile(oracle_machine(4), MLP_STRATEGY, Adam(lr=0.01))
    ex = trainer.executor
    eager = {ex.graph.nodes[i].launch.name for s in ex.capture.segments if s.device is None
             for k in range(s.start, s.stop) for i in ex.entries[k]
             if ex.graph.nodes[i].kind == "task"}
    assert {"drop/fwd", "drop/bwd"} <= eager, eager          # the pair follows the mask
    assert all(n.endswith("/update") or n.startswith("drop") for n in eager), eager
    reasons = {s.reason for s in ex.capture.segments if s.device is None}
    assert any("step count" in r and "drop" in r for r in reasons), reasons


@pytest.mark.parametrize("hazard", ["dropout", "adam"])
def test_without_its_hazard_a_step_value_is_baked_in(hazard, monkeypatch):
    """The checking replay reproduces a GPU's wrong result: the mask or Adam's bias
    correction of the capture step, replayed every step."""
    if hazard == "dropout":
        monkeypatch.setattr(Dropout, "capture_hazard", lambda self, spec=None: None)
    else:
        monkeypatch.delattr(update_task, "capture_hazard")
    build, strategy, opt, classes = CASES["mlp_adam_dropout"]
    eager, _ = train(monkeypatch, 0, build, strategy, opt, classes, steps=4)
    captured, _ = train(monkeypatch, MODE, build, strategy, opt, classes, steps=4)
    assert eager[1][0] == captured[1][0]            # the capture step itself runs right
    assert eager[3][0] != captured[3][0]


# -- mismatches are errors -------------------------------------------------------------------
def captured_trainer(monkeypatch, steps=3):
    monkeypatch.setenv("TASKRT_CUDA_GRAPHS", str(MODE))
    m = mlp(dropout=0)
    trainer = m.compile(oracle_machine(4), MLP_STRATEGY, SGD(lr=0.1))
    feeds = random_feeds(m, 0, 4)
    for _ in range(steps):
        trainer.step(feeds)
    return trainer, feeds


def test_input_of_another_shape_is_an_error(monkeypatch):
    trainer, _ = captured_trainer(monkeypatch)
    with pytest.raises(PlanError, match=r"write 'x': tensor of shape \(4, 6\) for a region "
                                        r"of shape \(8, 6\)"):
        trainer.executor.write("x", torch.zeros(4, 6, dtype=torch.float64))


def test_replaced_plan_is_an_error(monkeypatch):
    trainer, feeds = captured_trainer(monkeypatch)
    ex = trainer.executor
    ex.plan = list(ex.plan)
    with pytest.raises(ExecutionError, match="plan was replaced after CUDA-graph capture.*"
                                             "TASKRT_CUDA_GRAPHS=0"):
        trainer.step(feeds)


def test_new_storage_for_a_static_buffer_is_an_error(monkeypatch):
    trainer, _ = captured_trainer(monkeypatch)
    buf = next(b for (name, _), b in trainer.executor.store.instances.items()
               if name.startswith("fc1") and b.numel)
    with pytest.raises(ExecutionError, match="new storage for a buffer whose address a "
                                             "captured CUDA graph holds"):
        buf.attach(torch.zeros(buf.numel, dtype=buf.dtype))
    assert not buf.adopt(torch.zeros(buf.size, dtype=buf.dtype))


@cpu_only
def test_a_buffer_whose_storage_moved_is_caught_before_replay(monkeypatch):
    trainer, feeds = captured_trainer(monkeypatch)
    buf = next(b for b in trainer.executor.store.instances.values() if b.numel)
    buf.tensor = buf.tensor.clone()              # what an adoption after capture would do
    with pytest.raises(ExecutionError, match="changed storage after capture"):
        trainer.step(feeds)


@cpu_only
def test_a_host_sync_inside_a_segment_is_an_error(monkeypatch):
    from parallel_ops.linear import Linear
    forward = Linear.forward_saving

    def syncing(self, spec, inputs, weights):
        float(inputs[0].sum())                    # .item(): a sync a graph cannot hold
        return forward(self, spec, inputs, weights)
    monkeypatch.setattr(Linear, "forward_saving", syncing)
    with pytest.raises(ExecutionError, match=r"CUDA-graph capture of entries .* at entry "
                                             r"\d+ \(task fc1/fwd.*_local_scalar_dense.*"
                                             r"TASKRT_CUDA_GRAPHS=0"):
        captured_trainer(monkeypatch, steps=2)


# -- the flag ----------------------------------------------------------------------------------
def test_flag_off_or_no_gpu_changes_nothing(monkeypatch):
    for mode in ("0", "1") if not torch.cuda.is_available() else ("0",):
        monkeypatch.setenv("TASKRT_CUDA_GRAPHS", mode)
        ex = mlp().compile(Machine.local(4), MLP_STRATEGY, SGD(lr=0.1)).executor
        assert ex.capture is None and not ex.store.static and ex.store.temporaries


def test_bad_flag_value_is_an_error(monkeypatch):
    monkeypatch.setenv("TASKRT_CUDA_GRAPHS", "3")
    with pytest.raises(PlanError, match=r"TASKRT_CUDA_GRAPHS=3: use 0 \(off\), 1"):
        mlp().compile(Machine.local(4), MLP_STRATEGY, SGD(lr=0.1))


def test_tracing_runs_eagerly(monkeypatch):
    monkeypatch.setenv("TASKRT_CUDA_GRAPHS", "2")
    trainer = mlp().compile(Machine.local(4), MLP_STRATEGY, SGD(lr=0.1), record_trace=True)
    assert trainer.executor.capture is None


def test_segments_cover_the_plan_in_order(monkeypatch):
    monkeypatch.setenv("TASKRT_CUDA_GRAPHS", "2")
    ex = small_cnn()[0].compile(Machine.local(4), CNN_STRATEGY, SGD(lr=0.1)).executor
    segs = split(ex.graph, ex.entries, ex.store.torch_device, CheckedReplay())
    assert segs[0].start == 0 and segs[-1].stop == len(ex.plan)
    assert all(a.stop == b.start for a, b in zip(segs, segs[1:]))
    assert all((a.device, a.reason) != (b.device, b.reason) for a, b in zip(segs, segs[1:]))
    assert isinstance(ex, LocalExecutor)
