"""Hugging Face transformers models (GPT-2, BERT, Llama; tiny configs, random init, no
download) import exactly as their users call them, model(input_ids=..., attention_mask=...,
labels=...), and train under data parallel and model-parallel strategies equal to eager
PyTorch on the model's own loss (or on logits plus a loss the user names).

Tolerances: BERT's loss is computed in the model's dtype, so float64 runs agree to 1e-9.
GPT-2's and Llama's causal-LM loss upcasts the logits to float32 (`logits.float()`, and
Llama's RMSNorm computes in float32 too), so a float64 model trained on its own loss carries
float32 rounding of the loss gradient: 1e-6. With a float64 loss the user names (logits
plus cross-entropy) they agree to 1e-9. float32 models: 1e-4 (rounding of reordered sums).
"""
import copy
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import assert_state_close  # noqa: E402
from hf_models import (HF_MODELS, LLAMA_LIKE, STRATEGY_NAMES, llama_like,  # noqa: E402
                       transformers, torch_steps)
from hf_replay import dropping_ops, torch_steps_replayed  # noqa: E402
from parallel_ops import SGD  # noqa: E402
from parallel_ops.importer import import_module  # noqa: E402
from taskrt import Machine  # noqa: E402

pytestmark = pytest.mark.skipif(transformers is None, reason="transformers is not installed "
                                "(pip install -e '.[test]')")
DEVICES = 3
OWN_LOSS_F64 = {"gpt2": 1e-6, "bert": 1e-9, "llama": 1e-6}
CASES = [(m, "sdpa", s) for m in HF_MODELS for s in STRATEGY_NAMES] + \
        [("gpt2", "eager", s) for s in STRATEGY_NAMES] + \
        [(m, "eager", "mixed") for m in ("bert", "llama")]


def _train(net, inputs, strategy, optimizer, steps=2, **feeds):
    imp = import_module(net, inputs, method="export")
    trainer = imp.model.compile(Machine.local(DEVICES), strategy, optimizer)
    losses = [trainer.step(imp.feeds(**inputs, **feeds)) for _ in range(steps)]
    return losses, imp.state_dict(trainer.weights()), imp, trainer


@pytest.mark.parametrize("name,attn,strategy", CASES, ids=["-".join(c) for c in CASES])
def test_own_loss_float64_equals_eager(name, attn, strategy):
    build, strategies = HF_MODELS[name]
    net, inputs = build(attn=attn)
    opt = SGD(lr=0.1, momentum=0.9)
    want, want_state = torch_steps(net, inputs, copy.deepcopy(opt), 2)
    losses, state, imp, trainer = _train(net, inputs, strategies(DEVICES)[strategy],
                                         copy.deepcopy(opt))
    tol = OWN_LOSS_F64[name]
    assert imp.method == "export" and imp.model.loss_op is not None
    assert losses == pytest.approx(want, rel=tol)
    assert_state_close(state, want_state, rtol=tol, atol=tol * 1e-2, where=f"{name}/{strategy}")
    target = copy.deepcopy(net)
    imp.write_back(trainer, target)
    assert_state_close(target.state_dict(), state, rtol=0, atol=0, where="write_back")


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_logits_and_a_named_float64_loss_equal_eager_to_1e9(name):
    build, strategies = HF_MODELS[name]
    net, inputs = build()
    labels = inputs.pop("labels")
    opt = SGD(lr=0.1, momentum=0.9)
    ref = copy.deepcopy(net)
    torch_opt = opt.torch_optimizer(list(ref.parameters()))
    want = []
    for _ in range(2):
        torch_opt.zero_grad()
        logits = ref(**inputs).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 labels.reshape(-1))
        loss.backward()
        torch_opt.step()
        want.append(loss.item())
    imp = import_module(net, inputs, method="export")
    assert [o.shape for o in imp.outputs] == [tuple(logits.shape)]
    imp.add_cross_entropy()
    trainer = imp.model.compile(Machine.local(DEVICES), strategies(DEVICES)["mixed"],
                                copy.deepcopy(opt))
    losses = [trainer.step(imp.feeds(**inputs, labels=labels)) for _ in range(2)]
    assert losses == pytest.approx(want, rel=1e-10)
    assert_state_close(imp.state_dict(trainer.weights()), ref.state_dict(), rtol=1e-9,
                       atol=1e-11)


@pytest.mark.parametrize("name", list(HF_MODELS))
def test_float32_equals_eager(name):
    build, strategies = HF_MODELS[name]
    net, inputs = build(dtype=torch.float32)
    opt = SGD(lr=0.1, momentum=0.9)
    want, want_state = torch_steps(net, inputs, copy.deepcopy(opt), 2)
    losses, state, *_ = _train(net, inputs, strategies(DEVICES)["mixed"], copy.deepcopy(opt))
    assert losses == pytest.approx(want, rel=1e-5)
    assert_state_close(state, want_state, rtol=1e-4, atol=1e-6, where=name)


DROPOUT_CASES = [("gpt2", "sdpa"), ("gpt2", "eager"), ("bert", "sdpa"), ("llama", "sdpa")]


@pytest.mark.parametrize("name,attn", DROPOUT_CASES, ids=["-".join(c) for c in DROPOUT_CASES])
def test_dropout_trains_with_split_independent_masks(name, attn):
    """Default-style dropout (p=0.1 everywhere, attention too): the imported model's
    masks are the same under every strategy, and eager PyTorch drawing those masks
    trains identically."""
    build, strategies = HF_MODELS[name]
    net, inputs = build(dropout=0.1, attn=attn)
    opt = SGD(lr=0.1, momentum=0.9)
    results = {}
    for strategy in ("data_parallel", "mixed"):
        results[strategy] = _train(net, inputs, strategies(DEVICES)[strategy],
                                   copy.deepcopy(opt))
    losses, state, imp, _ = results["mixed"]
    assert len(dropping_ops(imp.model)) >= 2          # Llama: attention dropout only
    assert results["data_parallel"][0] == losses
    want, want_state = torch_steps_replayed(net, inputs, imp.model, copy.deepcopy(opt), 2)
    tol = OWN_LOSS_F64[name]
    assert losses == pytest.approx(want, rel=tol)
    assert_state_close(state, want_state, rtol=tol, atol=tol * 1e-2, where=f"{name} dropout")
    no_drop, _ = torch_steps(net, inputs, copy.deepcopy(opt), 1)
    assert abs(no_drop[0] - losses[0]) > 1e-6          # dropout did something


@pytest.mark.parametrize("cls_name", LLAMA_LIKE)
@pytest.mark.parametrize("strategy_name", STRATEGY_NAMES)
def test_qwen2_and_mistral_with_padding_equal_eager(cls_name, strategy_name):
    net, inputs = llama_like(cls_name)
    opt = SGD(lr=0.1, momentum=0.9)
    want, want_state = torch_steps(net, inputs, copy.deepcopy(opt), 2)
    strategy = HF_MODELS["llama"][1](DEVICES)[strategy_name]
    losses, state, imp, _ = _train(net, inputs, strategy, copy.deepcopy(opt))
    assert losses == pytest.approx(want, rel=1e-6)
    assert_state_close(state, want_state, rtol=1e-6, atol=1e-8, where=cls_name)
