"""Transformer: a GPT-style decoder (token and position embeddings, pre-layernorm blocks of
causal multi-head attention and a GELU MLP with residual connections, a final layernorm
and a softmax over the vocabulary), trained as a language model.

    mpirun -np 2 python -m mpi4py apps/transformer.py --small              # 2 CPU ranks
    mpirun -np 4 python -m mpi4py apps/transformer.py --layers 12 --batch-size 32   # 4 GPUs
    python apps/transformer.py --small --devices-per-rank 2 --export gpt.json

Full size is GPT-2 small: 12 layers, width 768, 12 heads, sequence 1024, vocabulary 50257
(about 163M parameters: the output layer is not tied to the token embedding), per-device
batch 8. --small: 2 layers, width 32, 4 heads, sequence 16, vocabulary 256. No dropout.
Synthetic token streams following a learnable rule (apps/sizes.py), deterministic by
--seed; the targets are the next tokens.
"""
from __future__ import annotations

from apps.scriptgc import exit_frozen, imports_paused

with imports_paused():                 # (torch's and our objects: apps/scriptgc.py)
    import torch

    from apps.common import App, Network, P, UsageError, main
    from apps.sizes import add_size_arguments, sizes, stream
    from parallel_ops import Model

FULL = dict(vocab=50257, width=768, heads=12, layers=12, seq_len=1024)
SMALL = dict(vocab=256, width=32, heads=4, layers=2, seq_len=16)


class GPTNetwork(Network):
    def synthetic(self, seed, iteration):
        n, t = self.model.tensors["tokens"].shape
        g = torch.Generator().manual_seed(seed * 1_000_003 + iteration)
        s = stream(n, t + 1, self.int_ranges["tokens"], g)
        return {"tokens": s[:, :-1].contiguous(), "targets": s[:, 1:].contiguous(),
                "positions": self.fixed["positions"]}


def build(a) -> Network:
    return gpt_network(a, sizes(a, FULL, SMALL), a.batch_size)


def gpt_network(a, s: dict, n: int, name: str = "transformer") -> Network:
    """The GPT of sizes `s` (vocab, width, heads, layers, seq_len) at batch `n`, in a.dtype."""
    t, d, v = s["seq_len"], s["width"], s["vocab"]
    if d % s["heads"]:
        raise UsageError(f"--width {d} is not a multiple of --heads {s['heads']}; "
                         "use a width divisible by the head count.")
    m = Model(name, seed=a.seed, dtype=a.dtype)
    tokens = m.input("tokens", (n, t), dtype="int64")
    positions = m.input("positions", (n, t), dtype="int64")
    targets = m.input("targets", (n, t), dtype="int64")
    x = m.add(m.embedding(tokens, v, d, name="wte"),
                     m.embedding(positions, t, d, name="wpe"), name="embed_sum")
    for k in range(s["layers"]):
        b = f"h{k}"
        y = m.multihead_attention(m.layernorm(x, name=f"{b}/ln_1"), s["heads"], causal=True,
                                  name=f"{b}/attn")
        x = m.add(x, y, name=f"{b}/add_1")
        y = m.linear(m.layernorm(x, name=f"{b}/ln_2"), 4 * d, name=f"{b}/mlp_fc",
                     activation="gelu")
        y = m.linear(y, d, name=f"{b}/mlp_proj")
        x = m.add(x, y, name=f"{b}/add_2")
    logits = m.linear(m.layernorm(x, name="ln_f"), v, name="lm_head")
    m.softmax_cross_entropy(logits, targets, name="loss")
    pos = torch.arange(t).expand(n, t).contiguous()
    return GPTNetwork(m, {"tokens": v, "targets": v}, logits=logits.name,
                      fixed={"positions": pos})


def mixed_strategy(model: Model, n: int) -> dict:
    """Megatron-style: attention split over heads, the MLP's first layer (with its fused
    GELU) on its outputs and its second on its inputs (partial sums); layernorms
    and residual adds data parallel; sequence positions split in the first block's attention
    (attribute); the vocabulary split in the output layer and the loss."""
    devs = list(range(n))
    out = {"wte": P(devs, d=n), "wpe": P([0])}
    heads = {op.name: op for op in model.ops}
    for name, op in heads.items():
        if op.type == "multihead_attention":
            out[name] = P(devs, h=n) if name != "h0/attn" else P(devs, s=n)
        elif name.endswith("/mlp_fc"):
            out[name] = P(devs, o=n)
        elif name.endswith("/mlp_proj"):
            out[name] = P(devs, i=n)
    out["lm_head"] = P(devs, o=n)
    out["loss"] = P(list(reversed(devs)), c=n)
    return out


APP = App("transformer", "Transformer", build, per_device_batch=8, small_per_device_batch=4,
          add_arguments=lambda p: add_size_arguments(p, FULL, SMALL),
          mixed_strategy=mixed_strategy, lr=0.05)

if __name__ == "__main__":
    exit_frozen(main(APP))          # (no collection at shutdown: apps/scriptgc.py)
