"""Train a module in plain PyTorch and its imported model under a strategy; compare."""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from parallel_ops.importer import import_module


def torch_steps(net, inputs, labels, optimizer, steps):
    """Losses per step and the final state dict of plain PyTorch training (a copy of net)."""
    net = copy.deepcopy(net)
    net.train()
    opt = optimizer.torch_optimizer([p for p in net.parameters() if p.requires_grad])
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        out = net(*inputs)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), labels.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, net.state_dict()


def imported_steps(net, inputs, labels, strategy, machine, optimizer, steps, method="auto",
                   fuse_activations=True):
    """Losses per step and the written-back state dict of the imported model's training."""
    imp = import_module(net, inputs, method=method, fuse_activations=fuse_activations)
    imp.add_cross_entropy()
    trainer = imp.model.compile(machine, strategy, optimizer)
    feeds = imp.feeds(*inputs, labels=labels)
    losses = [trainer.step(feeds) for _ in range(steps)]
    return losses, imp.state_dict(trainer.weights()), imp, trainer


def assert_state_close(got, want, rtol=1e-8, atol=1e-10, where=""):
    assert set(got) == set(want), f"{where}: keys differ: {set(got) ^ set(want)}"
    for k, w in want.items():
        g = got[k]
        assert g.shape == w.shape and g.dtype == w.dtype, f"{where}: {k} {g.shape} {g.dtype}"
        if w.is_floating_point():
            err = (g - w).abs().max().item() if w.numel() else 0.0
            assert torch.allclose(g, w, rtol=rtol, atol=atol), f"{where}: {k} max err {err:.3e}"
        else:
            assert torch.equal(g, w), f"{where}: {k} {g} vs {w}"


def run_mpi(np_, args, timeout, root):
    """`mpirun -np N python -m mpi4py ARGS` (see tests/mpi_launch.py); (returncode, output)."""
    from mpi_launch import run_mpi as launch
    rc, out, _ = launch(np_, args, timeout, env={"TASKRT_WATCHDOG_S": str(max(30, timeout // 2))},
                        cwd=root)
    return rc, out


def per_rank_results(tmp_dir, script, ranks, timeout, root):
    """Run `script OUT_DIR` under mpirun with `ranks` ranks; each rank's rank<r>.json."""
    import json
    import os
    rc, text = run_mpi(ranks, [script, str(tmp_dir)], timeout, root)
    assert rc == 0, text[-4000:]
    return [json.load(open(os.path.join(tmp_dir, f"rank{r}.json"))) for r in range(ranks)]
