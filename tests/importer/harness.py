"""Train a module in plain PyTorch and its imported model under a strategy; compare."""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from parallel_ops.importer import import_module


def eager_steps(net, loss_of, optimizer, steps):
    """Losses per step and the final state dict of plain PyTorch training of a copy of net;
    loss_of(net, step) gives step's loss (steps count from 1, as the trainer's)."""
    net = copy.deepcopy(net)
    net.train()
    opt = optimizer.torch_optimizer([p for p in net.parameters() if p.requires_grad])
    losses = []
    for step in range(1, steps + 1):
        opt.zero_grad()
        loss = loss_of(net, step)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, net.state_dict()


def torch_steps(net, inputs, labels, optimizer, steps):
    """eager_steps on cross-entropy of the module's output against labels."""
    def loss_of(net, step):
        out = net(*inputs)
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), labels.reshape(-1))
    return eager_steps(net, loss_of, optimizer, steps)


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


def mpi_results(tmp_path_factory, ranks, args, timeout, root):
    """Run tests/importer/mpi_run.py OUT ARGS under mpirun; each rank's results (json)."""
    import json
    import os
    out = tmp_path_factory.mktemp("mpi_run")
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_run.py")
    rc, text = run_mpi(ranks, [path, str(out), *args], timeout, root)
    assert rc == 0, text[-4000:]
    return [json.load(open(out / f"rank{r}.json")) for r in range(ranks)]


def run_mpi(np_, args, timeout, root):
    """`mpirun -np N python -m mpi4py ARGS` (see tests/mpi_launch.py); (returncode, output)."""
    from mpi_launch import run_mpi as launch
    rc, out, _ = launch(np_, args, timeout, env={"TASKRT_WATCHDOG_S": str(max(30, timeout // 2))},
                        cwd=root)
    return rc, out

