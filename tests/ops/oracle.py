"""PyTorch as the oracle: run a model partitioned, and as plain PyTorch, and compare.

`reference_steps` runs every op's `reference` (torch.nn.functional on whole tensors) with
torch autograd and the equivalent torch.optim optimizer. `parallel_steps` compiles the
model under a strategy on logical devices. `assert_matches` compares, after each step, the
loss, every op output, every gradient of inputs and weights, and the weights.
`random_feeds` draws a batch for a model's inputs.
"""
from __future__ import annotations

import itertools
import os
from math import prod

import torch

from taskrt import Machine
from parallel_ops import SGD, ParallelConfig


def reference_steps(model, feeds, optimizer, steps=2):
    """Per step: {'loss', 'values': {tensor: value}, 'grads': {name: grad}, 'weights': {...}}."""
    params = {}
    for w in model.weights:
        params[w.name] = model.initial_values[w.name].clone().requires_grad_(w.requires_grad)
    trainable = [params[w.name] for w in model.weights if w.requires_grad]
    opt = optimizer.torch_optimizer(trainable) if optimizer is not None and trainable else None
    records = []
    for step in range(steps):
        model.step_count = step + 1          # what the trainer sets before its step
        values = {}
        for t in model.inputs:
            v = feeds[t.name].clone()
            if t.requires_grad:
                v.requires_grad_(True)
            values[t.name] = v
        for op in model.ops:
            outs = op.reference([values[t.name] for t in op.inputs],
                                [params[w.name] for w in op.weights])
            for t, v in zip(op.outputs, outs):
                if v.requires_grad:
                    v.retain_grad()
                values[t.name] = v
        loss = values[model.loss_op.loss_tensor.name] if model.loss_op else None
        if opt is not None:
            opt.zero_grad()
        if loss is not None:
            loss.sum().backward()
        grads = {}
        for name, v in list(values.items()) + list(params.items()):
            if isinstance(v, torch.Tensor) and v.requires_grad and v.grad is not None:
                grads[name] = v.grad.detach().clone()
        if opt is not None:
            opt.step()
        records.append({"loss": None if loss is None else float(loss.detach().sum()),
                        "values": {k: v.detach().clone() for k, v in values.items()},
                        "grads": grads,
                        "weights": {k: v.detach().clone() for k, v in params.items()}})
    return records


def random_feeds(model, seed, classes):
    """A batch for every input of `model`, drawn in the order the model declares them from
    one generator seeded with `seed`: normal values for float inputs, class indices in
    [0, classes) for int64 inputs (labels, tokens)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for t in model.inputs:
        if t.dtype == "int64":
            out[t.name] = torch.randint(0, classes, t.shape, generator=g)
        else:
            out[t.name] = torch.randn(*t.shape, generator=g, dtype=getattr(torch, t.dtype))
    return out


def oracle_machine(num_devices):
    """Logical CPU devices, or, with SOAPFLOW_TEST_DEVICE=cuda, logical devices spread over
    the GPUs (the same tests then check GPU numerics against the CPU reference)."""
    if os.environ.get("SOAPFLOW_TEST_DEVICE") == "cuda":
        return Machine.local(num_devices, "cuda", num_gpus=torch.cuda.device_count())
    return Machine.local(num_devices)


def parallel_steps(model, feeds, strategy, num_devices=4, optimizer=None, steps=2):
    model.step_count = 0
    # keep="all": every activation and gradient is read after each step.
    trainer = model.compile(oracle_machine(num_devices), strategy, optimizer, keep="all")
    records = []
    for _ in range(steps):
        loss = trainer.step(feeds)
        values, grads = {}, {}
        for op in model.ops:
            for t in op.outputs:
                values[t.name] = trainer.read(t.name)
        for t in model.inputs:
            if t.requires_grad and t.grad_name in trainer.graph.regions:
                grads[t.name] = trainer.read(t.grad_name)
        for op in model.ops:
            for t in op.outputs:
                if t.grad_name in trainer.graph.regions:
                    grads[t.name] = trainer.read(t.grad_name)
        for w in model.weights:
            if w.grad_name in trainer.graph.regions:
                grads[w.name] = trainer.read(w.grad_name)
        records.append({"loss": loss, "values": values, "grads": grads,
                        "weights": trainer.weights()})
    return records, trainer


def _close(a, b, what, rtol, atol):
    a, b = a.detach().to(torch.float64), b.detach().to(torch.float64)
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} vs reference {tuple(b.shape)}"
    if not torch.allclose(a, b, rtol=rtol, atol=atol):
        err = (a - b).abs().max().item()
        raise AssertionError(f"{what}: max abs error {err:.3e} (rtol {rtol}, atol {atol})")


def assert_matches(model, feeds, strategy, num_devices=4, optimizer=None, steps=2,
                   rtol=1e-7, atol=1e-9, check_grads=True):
    """Partitioned training under `strategy` equals plain PyTorch, step by step."""
    optimizer_ref = optimizer if optimizer is not None else SGD(lr=0.1, momentum=0.9)
    import copy
    ours, trainer = parallel_steps(model, feeds, strategy, num_devices,
                                   copy.deepcopy(optimizer_ref), steps)
    ref = reference_steps(model, feeds, copy.deepcopy(optimizer_ref), steps)
    where = f"strategy {({k: str(v) for k, v in (strategy or {}).items()})}"
    for step, (o, r) in enumerate(zip(ours, ref)):
        if r["loss"] is not None:
            _close(torch.tensor(o["loss"]), torch.tensor(r["loss"]),
                   f"{where} step {step}: loss", rtol, atol)
        for name, v in o["values"].items():
            if name in r["values"]:
                _close(v, r["values"][name], f"{where} step {step}: value of {name}", rtol, atol)
        if check_grads:
            for name, g in r["grads"].items():
                if name in o["grads"]:
                    _close(o["grads"][name], g, f"{where} step {step}: grad of {name}", rtol, atol)
                elif any(w.name == name for w in model.weights) or \
                        any(t.name == name for t in model.inputs):
                    raise AssertionError(f"{where} step {step}: no gradient for {name}")
        for name, w in r["weights"].items():
            _close(o["weights"][name], w, f"{where} step {step}: weight {name} after update",
                   rtol, atol)
    return trainer


def legal_configs(op, num_devices=4, max_configs=None, seed=0):
    """Every legal degree assignment of `op` using at most `num_devices` parts (dims that
    must stay whole, Dim.whole, at degree 1), each with
    a device list that varies: in order, reversed/non-contiguous, and fewer devices than
    exist (several parts on one device when parts exceed devices is not generated)."""
    import random
    rng = random.Random(seed)
    dims = op.dims
    choices = [range(1, min(d.max_degree, num_devices) + 1) for d in dims]
    out = []
    for degs in itertools.product(*choices):
        n = prod(degs)
        if n > num_devices:
            continue
        named = tuple((d.name, g) for d, g in zip(dims, degs))
        lists = [list(range(n)), list(range(num_devices - 1, num_devices - 1 - n, -1))]
        perm = list(range(num_devices))
        rng.shuffle(perm)
        lists.append(perm[:n])
        seen = set()
        for devs in lists:
            if tuple(devs) not in seen:
                seen.add(tuple(devs))
                out.append(ParallelConfig(named, tuple(devs)))
    if max_configs is not None and len(out) > max_configs:
        rng.shuffle(out)
        out = out[:max_configs]
    return out
