"""NMT: GNMT-style translation: an encoder of 2 LSTM layers, a decoder of 2 LSTM layers that
starts from the encoder's final states, global attention over the last decoder layer, and a
softmax over the target vocabulary (hidden 1024, unrolled 40 steps each side).

    mpirun -np 2 python -m mpi4py apps/nmt.py --small                     # 2 CPU ranks
    mpirun -np 4 python -m mpi4py apps/nmt.py --batch-size 256            # 4 GPUs, 1 per rank
    python apps/nmt.py --small --devices-per-rank 2 --export nmt.json     # one process

Full size: vocabularies 20480, embedding 1024, hidden 1024, 2 + 2 layers, 40 source and
40 target steps, per-device batch 64. --small: vocabularies 256, width 32, 8 steps.
Synthetic sentence pairs following a learnable rule, deterministic by --seed: source
streams as in apps/sizes.py, target token v-1-s for source token s; the decoder reads the
target shifted right by one after a start token 0.
"""
from __future__ import annotations

from apps.scriptgc import exit_frozen, imports_paused

with imports_paused():                 # (torch's and our objects: apps/scriptgc.py)
    import torch

    from apps.common import App, Network, P, main
    from apps.sizes import add_size_arguments, sizes, stream
    from parallel_ops import Model

FULL = dict(vocab=20480, embed=1024, hidden=1024, layers=2, seq_len=40)
SMALL = dict(vocab=256, embed=32, hidden=32, layers=2, seq_len=8)


class TranslationNetwork(Network):
    def synthetic(self, seed, iteration):
        n, t = self.model.tensors["source"].shape
        v = self.int_ranges["source"]
        g = torch.Generator().manual_seed(seed * 1_000_003 + iteration)
        source = stream(n, t, v, g)
        target = v - 1 - source                  # the "translation": a fixed permutation
        start = torch.zeros(n, 1, dtype=torch.int64)
        return {"source": source, "target_in": torch.cat([start, target[:, :-1]], 1),
                "target_out": target}


def build(a) -> Network:
    s = sizes(a, FULL, SMALL)
    n, t, v = a.batch_size, s["seq_len"], s["vocab"]
    m = Model("nmt", seed=a.seed, dtype=a.dtype)
    source = m.input("source", (n, t), dtype="int64")
    target_in = m.input("target_in", (n, t), dtype="int64")
    target_out = m.input("target_out", (n, t), dtype="int64")
    enc, finals = m.lstm(m.embedding(source, v, s["embed"], name="enc_embed"), s["hidden"],
                         num_layers=s["layers"], return_state=True, name="encoder")
    dec = m.lstm(m.embedding(target_in, v, s["embed"], name="dec_embed"), s["hidden"],
                 num_layers=s["layers"], state=finals, name="decoder")
    att = m.seq_attention(dec, enc, name="attention")
    logits = m.linear(att, v, name="softmax_fc")
    m.softmax_cross_entropy(logits, target_out, name="loss")
    return TranslationNetwork(m, {"source": v, "target_in": v, "target_out": v},
                              logits=logits.name)


def mixed_strategy(model: Model, n: int) -> dict:
    """As the paper's NMT strategy: embeddings on single devices (no synchronization),
    encoder and decoder layers on different devices (inter-layer concurrency), attention
    split on target positions, softmax split on the vocabulary (parameter)."""
    out = {"enc_embed": P([0]), "dec_embed": P([n - 1])}
    layers = [op.name for op in model.ops if op.type == "lstm"]
    for k, name in enumerate(layers):
        out[name] = P([k % n])
    out["attention"] = P(list(range(n)), t=n)
    out["softmax_fc"] = P(list(range(n)), o=n)
    out["loss"] = P(list(range(n)), c=n)
    return out


APP = App("nmt", "NMT", build, per_device_batch=64, small_per_device_batch=8,
          add_arguments=lambda p: add_size_arguments(p, FULL, SMALL),
          mixed_strategy=mixed_strategy, expert="layer_per_device", lr=0.1)

if __name__ == "__main__":
    exit_frozen(main(APP))          # (no collection at shutdown: apps/scriptgc.py)
