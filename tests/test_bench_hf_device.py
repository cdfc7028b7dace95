"""The runtime-overhead benchmark's imported Hugging Face rows (bench/runtime_overhead.py,
bench/_imported_hf.py) follow the benchmark's device: on the CPU, two processes timed by
CPU time with the model on the CPU; with SOAPFLOW_BENCH_DEVICE=cuda on a GPU, wall time,
a third process with CUDA-graph capture, and model, batch and our executor's device on the
GPU. This machine has no GPU: the cuda variant is built as far as it goes (torch reports
CUDA as available only where the device choice reads it) and must fail at the first CUDA
allocation, having built a plan for a CUDA machine. No time is measured here."""
import pytest
import torch

from bench import _imported_hf as imported
from bench import runtime_overhead as ro

needs_transformers = pytest.mark.skipif(not imported.available(),
                                        reason="transformers is not installed")


@pytest.fixture
def cpu_bench(monkeypatch):
    monkeypatch.delenv("SOAPFLOW_BENCH_DEVICE", raising=False)
    monkeypatch.delenv("SOAPFLOW_BENCH_GRAPHS", raising=False)
    monkeypatch.delenv("TASKRT_CUDA_GRAPHS", raising=False)


@pytest.fixture
def cuda_bench(monkeypatch, cpu_bench):
    """SOAPFLOW_BENCH_DEVICE=cuda, and torch.cuda.is_available() true (no GPU here: only
    the device choice and what is built for it are tested)."""
    monkeypatch.setenv("SOAPFLOW_BENCH_DEVICE", "cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


def hf_makers(kind: str) -> dict:
    return ro.hf_makers(kind, True)


def test_cpu_rows_choose_the_cpu_and_two_processes(cpu_bench, monkeypatch):
    assert (ro._device(), ro._clock(), ro._graphs()) == ("cpu", "cpu", False)
    assert hf_makers("gpt2") == {"ours": (ro.__name__, "hf_step", ("ours", "gpt2", True)),
                                 "pytorch": (ro.__name__, "hf_step",
                                             ("pytorch", "gpt2", True))}
    # Asking for cuda on a machine without one stays on the CPU.
    monkeypatch.setenv("SOAPFLOW_BENCH_DEVICE", "cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert (ro._device(), ro._clock(), set(hf_makers("gpt2"))) == ("cpu", "cpu",
                                                                   {"ours", "pytorch"})


def test_cuda_rows_choose_wall_time_and_a_captured_third_process(cuda_bench, monkeypatch):
    assert (ro._device(), ro._clock(), ro._graphs()) == ("cuda", "wall", True)
    makers = hf_makers("gpt2")
    assert makers["ours_graphs"] == (ro.__name__, "hf_step", ("ours", "gpt2", True, True))
    assert set(makers) == {"ours", "pytorch", "ours_graphs"}
    monkeypatch.setenv("SOAPFLOW_BENCH_GRAPHS", "0")
    assert set(hf_makers("bert")) == {"ours", "pytorch"}


@needs_transformers
def test_cpu_steps_run_on_the_cpu_unwrapped(cpu_bench):
    ours = ro.hf_step("ours", "gpt2", True)
    assert {d.kind for d in ours.trainer.machine.devices} == {"cpu"}
    assert ours.__qualname__ == "ours_step.<locals>.step"     # not waiting for a GPU
    ours()
    eager = ro.hf_step("pytorch", "gpt2", True)
    assert eager.__qualname__ == "eager_step.<locals>.step"
    eager()


def _frame_local(exc: BaseException, function: str, name: str, kind: type = object):
    """The local `name` (an instance of `kind`) of the innermost frame of `function` in
    exc's traceback."""
    found, tb = None, exc.__traceback__
    while tb is not None:
        value = tb.tb_frame.f_locals.get(name)
        if tb.tb_frame.f_code.co_name == function and isinstance(value, kind):
            found = value
        tb = tb.tb_next
    assert found is not None, f"no frame of {function} with {name} in the traceback"
    return found


@needs_transformers
@pytest.mark.skipif(torch.cuda.is_available(), reason="a real GPU: gpu_checks.sh runs it")
def test_cuda_ours_builds_its_plan_for_the_gpu(cuda_bench):
    """Ours on cuda: the trainer's machine and every node of its plan on CUDA device 0, and
    its store allocating there (where a CPU build of torch stops), capture on when asked."""
    import os
    from parallel_ops.trainer import Trainer
    from taskrt.executor.instances import InstanceStore
    with pytest.raises((AssertionError, RuntimeError), match="CUDA") as info:
        ro.hf_step("ours", "gpt2", True, True)
    assert os.environ["TASKRT_CUDA_GRAPHS"] == "1"
    trainer = _frame_local(info.value, "__init__", "self", Trainer)
    assert [(d.kind, d.index) for d in trainer.machine.devices] == [("cuda", 0)]
    assert len(trainer.graph) > 50 and trainer.graph.machine is trainer.machine
    store = _frame_local(info.value, "__init__", "self", InstanceStore)
    assert {str(d) for d in store.torch_device.values()} == {"cuda:0"}


@needs_transformers
@pytest.mark.skipif(torch.cuda.is_available(), reason="a real GPU: gpu_checks.sh runs it")
def test_cuda_eager_moves_model_and_batch_to_the_gpu(cuda_bench):
    with pytest.raises((AssertionError, RuntimeError), match="CUDA") as info:
        ro.hf_step("pytorch", "gpt2", True)
    assert _frame_local(info.value, "eager_step", "device") == "cuda"
    assert imported.machine("cuda").devices[0].kind == "cuda"


def test_gpu_steps_wait_for_the_gpu_and_keep_their_attributes(monkeypatch):
    """On a GPU each timed call ends with torch.cuda.synchronize (recorded here, not run)."""
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: calls.append("synchronize"))

    def step():
        calls.append("step")
    step.nodes, step.trainer = 7, "trainer"
    assert ro._synchronized(step, "cpu") is step
    waiting = ro._synchronized(step, "cuda")
    waiting()
    assert calls == ["step", "synchronize"]
    assert (waiting.nodes, waiting.trainer) == (7, "trainer")
