"""Tiny Hugging Face transformers (random init from a config, default dropout) trained on their
own loss: GPT-2 (causal LM) and BERT (sequence classification). The step of the model
imported with parallel_ops.importer, and the same step in eager PyTorch, on a device given
by bench/runtime_overhead.py (which owns the choice of device, clock and CUDA-graph capture):
model, batch and our executor's one device all on it. Built on the CPU, then moved.
"""
from __future__ import annotations

import os

import torch

from taskrt import Machine
from taskrt.executor.cpumemory import retain_freed_memory

BATCH, SEQ = 8, 32
KINDS = ("gpt2", "bert")


def describe(kind: str, quick: bool) -> str:
    layers, width = (1, 16) if quick else (2, 64)
    return f"{layers} layer{'s' if layers > 1 else ''}, width {width}, seq {SEQ}, batch {BATCH}"


def _model_and_batch(kind: str, quick: bool):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers
    transformers.logging.set_verbosity_error()
    layers, width = (1, 16) if quick else (2, 64)
    torch.manual_seed(0)
    ids = torch.randint(0, 128, (BATCH, SEQ), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    if kind == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=128, n_positions=SEQ, n_embd=width,
                                      n_layer=layers, n_head=4, bos_token_id=0,
                                      eos_token_id=0)
        return transformers.GPT2LMHeadModel(cfg), {"input_ids": ids, "attention_mask": mask,
                                                   "labels": ids}
    if kind == "bert":
        cfg = transformers.BertConfig(vocab_size=128, hidden_size=width,
                                      num_hidden_layers=layers, num_attention_heads=4,
                                      intermediate_size=4 * width,
                                      max_position_embeddings=SEQ, num_labels=3,
                                      pad_token_id=0)
        labels = torch.randint(0, 3, (BATCH,), generator=torch.Generator().manual_seed(1))
        return transformers.BertForSequenceClassification(cfg), {
            "input_ids": ids, "attention_mask": mask, "labels": labels}
    raise ValueError(f"unknown model kind {kind!r}; use one of {KINDS}")


def available() -> bool:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


def machine(device: str) -> Machine:
    """The machine our executor runs the imported model on: one local `device` ("cpu" or
    "cuda")."""
    return Machine.local(1, device)


def ours_step(kind: str, quick: bool, device: str = "cpu"):
    """One training iteration of the imported model on one local `device`, the batch on it."""
    from parallel_ops import SGD
    from parallel_ops.importer import import_module
    torch.set_num_threads(1)
    net, inputs = _model_and_batch(kind, quick)
    imp = import_module(net, inputs, method="export")
    trainer = imp.model.compile(machine(device), None, SGD(lr=0.01, momentum=0.9),
                                executor="local")
    feeds = {name: value.to(device) for name, value in imp.feeds(**inputs).items()}

    def step():
        trainer.step(feeds)
    step.nodes = len(trainer.graph)
    step.trainer = trainer
    return step


def eager_step(kind: str, quick: bool, device: str = "cpu"):
    """The same iteration in eager PyTorch on `device` (the malloc settings our executor
    uses)."""
    torch.set_num_threads(1)
    retain_freed_memory()
    net, inputs = _model_and_batch(kind, quick)
    net = net.to(device)
    inputs = {name: value.to(device) for name, value in inputs.items()}
    net.train()
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, foreach=False)

    def step():
        opt.zero_grad()
        net(**inputs).loss.backward()
        opt.step()
    return step
