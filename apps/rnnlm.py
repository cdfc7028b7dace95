"""RNNLM: a language model with 2 stacked LSTM layers (hidden 2048, unrolled 40 steps) and a
softmax over the vocabulary at every step, as in the FlexFlow paper's benchmarks.

    mpirun -np 2 python -m mpi4py apps/rnnlm.py --small                   # 2 CPU ranks
    mpirun -np 4 python -m mpi4py apps/rnnlm.py --batch-size 256          # 4 GPUs, 1 per rank
    python apps/rnnlm.py --small --devices-per-rank 2 --export rnnlm.json # one process

Full size: vocabulary 20480, embedding 2048, 2 layers of hidden 2048, 40 steps,
per-device batch 64. --small: vocabulary 256, width 32, 8 steps. Synthetic token streams
following a learnable rule (apps/sizes.py), deterministic by --seed; the targets are the
next tokens.
"""
from __future__ import annotations

from apps.scriptgc import exit_frozen, imports_paused

with imports_paused():                 # (torch's and our objects: apps/scriptgc.py)
    import torch

    from apps.common import App, Network, P, main
    from apps.sizes import add_size_arguments, sizes, stream
    from parallel_ops import Model

FULL = dict(vocab=20480, embed=2048, hidden=2048, layers=2, seq_len=40)
SMALL = dict(vocab=256, embed=32, hidden=32, layers=2, seq_len=8)


class LanguageNetwork(Network):
    """Synthetic text (apps.sizes.stream); the targets are the tokens shifted by one."""

    def synthetic(self, seed, iteration):
        tokens = self.model.tensors["tokens"]
        n, t = tokens.shape
        g = torch.Generator().manual_seed(seed * 1_000_003 + iteration)
        s = stream(n, t + 1, self.int_ranges["tokens"], g)
        return {"tokens": s[:, :-1].contiguous(), "targets": s[:, 1:].contiguous()}


def build(a) -> Network:
    s = sizes(a, FULL, SMALL)
    n, t = a.batch_size, s["seq_len"]
    m = Model("rnnlm", seed=a.seed, dtype=a.dtype)
    tokens = m.input("tokens", (n, t), dtype="int64")
    targets = m.input("targets", (n, t), dtype="int64")
    x = m.embedding(tokens, s["vocab"], s["embed"], name="embed")
    h = m.lstm(x, s["hidden"], num_layers=s["layers"], name="rnn")
    logits = m.linear(h, s["vocab"], name="softmax_fc")
    m.softmax_cross_entropy(logits, targets, name="loss")
    return LanguageNetwork(m, {"tokens": s["vocab"], "targets": s["vocab"]}, logits=logits.name)


def mixed_strategy(model: Model, n: int) -> dict:
    """Embedding on one device, one LSTM layer per device (operation parallelism, as GNMT),
    the softmax layer split on the vocabulary (parameter) and the loss on classes."""
    layers = [op.name for op in model.ops if op.type == "lstm"]
    out = {"embed": P([0])}
    for k, name in enumerate(layers):
        out[name] = P([k % n])
    out["softmax_fc"] = P(list(range(n)), o=n)
    out["loss"] = P(list(range(n)), n=n)
    return out


APP = App("rnnlm", "RNNLM", build, per_device_batch=64, small_per_device_batch=8,
          add_arguments=lambda p: add_size_arguments(p, FULL, SMALL),
          mixed_strategy=mixed_strategy, expert="layer_per_device", lr=0.1)

if __name__ == "__main__":
    exit_frozen(main(APP))          # (no collection at shutdown: apps/scriptgc.py)
