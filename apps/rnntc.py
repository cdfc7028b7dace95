"""RNNTC: text classification with 4 stacked LSTM layers (hidden 1024, unrolled 40 steps)
and a softmax classifier on the last hidden state, as in the FlexFlow paper's benchmarks.

    mpirun -np 2 python -m mpi4py apps/rnntc.py --small                   # 2 CPU ranks
    mpirun -np 4 python -m mpi4py apps/rnntc.py --batch-size 256          # 4 GPUs, 1 per rank
    python apps/rnntc.py --small --devices-per-rank 2 --export rnntc.json # one process

Full size: vocabulary 20480, embedding 1024, 4 layers of hidden 1024, 40 steps, 10
classes, per-device batch 64. --small: vocabulary 256, width 32, 8 steps. Synthetic
random tokens labelled by their last token modulo the classes (learnable), deterministic
by --seed. Each LSTM layer is one operator (`rnn_l0` ..
`rnn_l3`), so a strategy can put layers on different devices (operation parallelism).
"""
from __future__ import annotations

from apps.scriptgc import exit_frozen, imports_paused

with imports_paused():                 # (torch's and our objects: apps/scriptgc.py)
    from apps.common import App, Network, P, main
    from apps.sizes import add_size_arguments, sizes
    from parallel_ops import Model

FULL = dict(vocab=20480, embed=1024, hidden=1024, layers=4, seq_len=40, classes=10)
SMALL = dict(vocab=256, embed=32, hidden=32, layers=4, seq_len=8, classes=10)


class TextNetwork(Network):
    """Random tokens; the label is the last token modulo the classes (learnable)."""

    def synthetic(self, seed, iteration):
        feeds = super().synthetic(seed, iteration)
        feeds["labels"] = feeds["tokens"][:, -1] % self.int_ranges["labels"]
        return feeds


def build(a) -> Network:
    s = sizes(a, FULL, SMALL)
    n = a.batch_size
    m = Model("rnntc", seed=a.seed, dtype=a.dtype)
    tokens = m.input("tokens", (n, s["seq_len"]), dtype="int64")
    labels = m.input("labels", (n,), dtype="int64")
    x = m.embedding(tokens, s["vocab"], s["embed"], name="embed")
    _, finals = m.lstm(x, s["hidden"], num_layers=s["layers"], return_state=True, name="rnn")
    logits = m.linear(finals[-1][0], s["classes"], name="classifier")
    m.softmax_cross_entropy(logits, labels, name="loss")
    return TextNetwork(m, {"tokens": s["vocab"], "labels": s["classes"]}, logits=logits.name)


def mixed_strategy(model: Model, n: int) -> dict:
    """Embedding rows split (reduction), layers spread over devices one after another
    (operation), the last layer split on hidden units (parameter), classifier and loss split
    on classes."""
    layers = [op.name for op in model.ops if op.type == "lstm"]
    out = {"embed": P(list(range(min(n, 2))), v=min(n, 2))}
    for k, name in enumerate(layers[:-1]):
        out[name] = P([k % n])
    out[layers[-1]] = P(list(range(n)), h=n)
    out["classifier"] = P(list(reversed(range(n))), o=n)
    out["loss"] = P(list(range(n)), c=n)
    return out


APP = App("rnntc", "RNNTC", build, per_device_batch=64, small_per_device_batch=8,
          add_arguments=lambda p: add_size_arguments(p, FULL, SMALL),
          mixed_strategy=mixed_strategy, expert="layer_per_device", lr=0.05)

if __name__ == "__main__":
    exit_frozen(main(APP))          # (no collection at shutdown: apps/scriptgc.py)
