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


def imported_steps(net, inputs, labels, strategy, machine, optimizer, steps, method="auto"):
    """Losses per step and the written-back state dict of the imported model's training."""
    imp = import_module(net, inputs, method=method)
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


def _open_files() -> set[str]:
    """Paths some process holds open (from /proc; best effort)."""
    import glob
    import os
    held = set()
    for fd in glob.glob("/proc/[0-9]*/fd/*"):
        try:
            held.add(os.readlink(fd))
        except OSError:
            pass
    return held


def run_mpi(np_, args, timeout, root):
    """Run `python -m mpi4py args` under mpirun in its own session; returns (code, output).
    On timeout kills the whole job and removes the shared-memory files it left (only new
    ones nobody holds open: other MPI jobs may be running on this machine)."""
    import glob
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import pytest
    here = os.path.dirname(sys.executable)
    mpirun = os.environ.get("SOAPFLOW_MPIRUN") or (
        os.path.join(here, "mpirun") if os.path.exists(os.path.join(here, "mpirun"))
        else shutil.which("mpirun") or "mpirun")
    cmd = [mpirun, "-np", str(np_), sys.executable, "-m", "mpi4py", *args]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=root,
               TASKRT_WATCHDOG_S=str(max(30, timeout // 2)))
    before = set(glob.glob("/dev/shm/mpich_shm_*"))
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                         start_new_session=True, text=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        held = _open_files()
        for f in set(glob.glob("/dev/shm/mpich_shm_*")) - before - held:
            try:
                os.unlink(f)
            except OSError:
                pass
        pytest.fail(f"mpirun {args} did not finish in {timeout} s:\n{out[-3000:]}")
    return p.returncode, out
