"""The simulator works from shapes alone: every built-in operator's tasks are counted on meta
tensors (strategy/costs/work.py), never on real CPU tensors of the part's size (a vocabulary-
parallel GPT-2.7B logits part is 6.7 GB), while real runs still check values (tests/ops/
test_embedding.py, test_linear_loss.py: out-of-range indices and labels); and a task
that cannot be counted on meta and is too large for CPU is costed by its bytes, with a
warning that says how to fix the operator."""
from __future__ import annotations

import random
import warnings

import pytest
from bench.sim_speed import random_config
from strategy.costs import CostModel, CostWarning
from strategy.costs import work as work_module
from strategy.costs.app_profile import load_app
from strategy.delta import SimulationSession
from strategy.experts import megatron
from strategy.machine_model import machine_model
from taskrt.taskgraph import TASK


@pytest.fixture
def counted_on(monkeypatch):
    """The devices each counted task ran on: {launch name: {devices}}. Every task is
    counted (declared work, strategy/costs/formulas.py, is off): counting is the path of
    operators without declarations and the declarations' oracle."""
    seen: dict = {}
    real = work_module._count
    monkeypatch.setattr(work_module, "declared_work", lambda node: None)

    def count(node, device, *args, **kwargs):
        seen.setdefault(node.launch.name, set()).add(device)
        return real(node, device, *args, **kwargs)
    monkeypatch.setattr(work_module, "_count", count)
    return seen


def _strategies(model, n: int):
    yield megatron(model, n, n, tensor_parallel=2)      # vocabulary-parallel embedding, loss
    rng = random.Random(0)
    for _ in range(2):
        yield {op.name: random_config(op, n, rng) for op in model.ops}


@pytest.mark.parametrize("app", ["gpt", "transformer", "rnnlm", "nmt", "inception"])
def test_every_builtin_task_is_counted_on_meta(app, counted_on):
    w = load_app(app, ["--small"], devices=4)
    strategies = _strategies(w.model, 4) if app == "gpt" else \
        list(_strategies(w.model, 4))[1:]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CostWarning)
        for strategy in strategies:
            SimulationSession(w.model, machine_model("p100:1"), CostModel(), strategy,
                              w.optimizer)
    assert counted_on, "nothing was counted"
    on_cpu = sorted(name for name, devices in counted_on.items() if devices != {"meta"})
    assert not on_cpu, f"counted on real CPU tensors: {on_cpu}"


def test_a_large_task_that_needs_values_is_costed_by_bytes_with_a_warning(monkeypatch):
    w = load_app("gpt", ["--small"], devices=1)
    session = SimulationSession(w.model, machine_model("p100:1"), CostModel(), None,
                                w.optimizer)
    node = next(n for n in session.graph.nodes if n.kind is TASK
                and n.launch.name.endswith("wte/fwd"))

    def meta_fails(node, device, *args, **kwargs):
        if device == "meta":
            raise RuntimeError("Tensor.item() cannot be called on meta tensors")
        raise AssertionError("counted on CPU")
    monkeypatch.setattr(work_module, "_count", meta_fails)
    monkeypatch.setattr(work_module, "declared_work", lambda node: None)   # counted
    monkeypatch.setattr(work_module, "CPU_COUNT_MAX_BYTES", 16)
    costs = CostModel()
    with pytest.warns(CostWarning, match=r"wte/fwd' cannot be counted on meta tensors .*"
                                         r"skip checks of values when a tensor `is_meta`"):
        w_ = costs.work(node)
    assert w_.flops == 0 and w_.bytes == work_module.node_bytes(node)


@pytest.mark.parametrize("app", ["inception", "nmt", "gpt"])
def test_remembered_meta_outputs_count_what_running_them_counts(app, monkeypatch):
    """MetaMemo (strategy/costs/metamemo.py) hands out remembered meta outputs: every
    task's FLOPs, kernels and traffic are what counting without it gives, under random
    strategies (many part shapes), both from an empty table and from a full one."""
    from strategy.costs.metamemo import MetaMemo
    w = load_app(app, [] if app == "inception" else ["--small"], devices=4)
    keys = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CostWarning)
        for strategy in list(_strategies(w.model, 4))[1:]:
            s = SimulationSession(w.model, machine_model("p100:1"), CostModel(), strategy,
                                  w.optimizer)
            for n in s.graph.nodes:
                if n.kind is TASK:
                    keys.setdefault(n.cost_key, n)
    nodes = list(keys.values())
    monkeypatch.setattr(MetaMemo, "TABLE", {})
    cold = [work_module._counts(n, None, None) for n in nodes]
    warm = [work_module._counts(n, None, None) for n in nodes]
    assert len(MetaMemo.TABLE) > 10
    monkeypatch.setattr(MetaMemo, "__torch_dispatch__",
                        lambda self, func, types, args=(), kwargs=None:
                        func(*args, **(kwargs or {})))
    plain = [work_module._counts(n, None, None) for n in nodes]
    assert cold == plain and warm == plain
