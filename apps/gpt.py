"""GPT at real sizes: the Transformer app's network (apps/transformer.py: learned positions,
pre-layernorm blocks, causal attention, GELU MLP of 4x width, untied output layer) with the
sizes of the models people parallelize today, by name (--config) or by flag, and the model
FLOPs of an iteration for the reports' TFLOP/s per device.

    python apps/gpt.py --config 1.7b --machine selene:4 --batch-size 512 --dtype bfloat16 --simulate
    mpirun -np 2 python -m mpi4py apps/gpt.py --small --optimizer adam

Every config has vocabulary 51,200 and sequence 2,048 (Megatron-LM's, Narayanan et al.
SC'21 Table 1); the output layer is NOT tied to the token embedding (the model has V*h more
parameters than Megatron's; its FLOPs are the same). --small: 2 layers, width 32, 4 heads,
sequence 16, vocabulary 256.

--search SECONDS searches one block's configs and recomputation tied across blocks on
1- and 2-block proxies, extrapolated to the full depth (strategy/tied.py, `search` below);
--search-whole-graph searches every operator of the full graph instead.

--recompute (parallel_ops/recompute.py): `full` recomputes every block in backward from its
input (Megatron-LM's full activation recomputation: only the blocks' inputs are kept),
`selective` only the attention operators (their inputs and outputs are kept), `none` (the
default) nothing.
"""
from __future__ import annotations

from apps.scriptgc import exit_frozen, imports_paused

with imports_paused():                 # (torch's and our objects: apps/scriptgc.py)
    from apps.common import App, UsageError, main
    from apps.sizes import add_size_arguments
    from apps.transformer import SMALL, gpt_network, mixed_strategy
    from parallel_ops.recompute import per_block, per_op, set_recompute

VOCAB, SEQ = 51200, 2048
# name -> (heads, width, layers); GPT-3's 13B has width 5140 in its paper, 5120 here (a
# multiple of its 40 heads).
CONFIGS = {"1.7b": (24, 2304, 24), "3.6b": (32, 3072, 30), "7.5b": (32, 4096, 36),
           "18b": (48, 6144, 40), "gpt2-xl": (25, 1600, 48), "gpt3-2.7b": (32, 2560, 32),
           "gpt3-6.7b": (32, 4096, 32), "gpt3-13b": (40, 5120, 40)}
DEFAULT = "1.7b"
RECOMPUTE = ("none", "selective", "full")


def config_sizes(name: str) -> dict:
    """The sizes (vocab, width, heads, layers, seq_len) of a named config."""
    if name not in CONFIGS:
        raise UsageError(f"--config {name}: not a known GPT; use one of {', '.join(CONFIGS)}.")
    heads, width, layers = CONFIGS[name]
    return dict(vocab=VOCAB, width=width, heads=heads, layers=layers, seq_len=SEQ)


def model_flops(batch: int, seq: int, layers: int, width: int, vocab: int,
                recompute: float = False) -> float:
    """FLOPs of one training iteration by Narayanan et al.'s count: 72 B s l h^2 (1 + s/(6h)
    + V/(16 l h)) (forward 1x, backward 2x), 96 with full activation recomputation (one more
    forward of the blocks; the logit layer is not recomputed, so it keeps the 72's weight).
    The published TFLOP/s per GPU use the 96 form. `recompute` may be the fraction of blocks
    recomputed (the search may choose some): 72 + 24 x that fraction.

        model_flops(512, 2048, 24, 2304, 51200, recompute=True)    # 1.7B row, ~1.1e18
    """
    b, s, l, h, v = batch, seq, layers, width, vocab
    k = 72 + 24 * float(recompute)
    return k * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))


def sizes_of(a) -> dict:
    """--small, else --config's sizes, each overridden by its flag."""
    base = SMALL if a.small else config_sizes(a.config or DEFAULT)
    out = {}
    for key, value in base.items():
        v = getattr(a, key, None)
        out[key] = value if v is None else v
        if out[key] < 1:
            raise UsageError(f"--{key.replace('_', '-')} {out[key]}: use a positive value.")
    return out


def block_of(op) -> str | None:
    """The transformer block an operator of gpt_network belongs to (`h<k>`), or None."""
    head, _, rest = op.name.partition("/")
    return head if rest and head[:1] == "h" and head[1:].isdigit() else None


def recompute_segments(model, kind: str) -> list[list[str]]:
    """The segments of --recompute `kind` (RECOMPUTE) for a gpt_network model."""
    if kind == "full":
        return per_block(model, block_of)
    if kind == "selective":
        return per_op(model, "multihead_attention")
    if kind == "none":
        return []
    raise UsageError(f"--recompute {kind}: use one of {', '.join(RECOMPUTE)}.")


def search_plans(model) -> dict:
    """What the search starts from: no recomputation, every block's, or every attention's
    (the fastest that fits); its chains then switch single segments, a block or one
    attention operator, on and off (strategy/moves.py RecomputeUnits: a block's full
    recomputation and its attention-only one exclude each other), so each block ends
    with none, selective or full recomputation."""
    return {kind: recompute_segments(model, kind) for kind in ("none", "full", "selective")}


def search(a, net, machine_model, costs, **kw):
    """--search for the GPT: by default the tied search (strategy/tied.py) on proxies of 1
    and 2 blocks with these widths, batch and machine, each block's configs and
    recomputation (none, selective or full) tied to the others', extrapolated to the full
    depth; --search-whole-graph searches every operator of the full-depth graph instead
    (strategy/search.py; a proposal per block, but a session build costs minutes at 64+ GPUs).
    Either way the result's recomputation is left set on `net.model`."""
    from strategy.search import search as search_whole
    from strategy.tied import search_tied
    if getattr(a, "search_whole_graph", False) or \
            sizes_of(a)["layers"] < 2:
        return search_whole(net.model, machine_model, costs, recompute=search_plans(net.model),
                            **kw)
    return search_tied(net.model, machine_model, costs, proxy=lambda k: proxy(a, k),
                       block_of=block_of, recompute=search_plans, **kw)


def proxy(a, blocks: int):
    """The GPT of these flags with `blocks` blocks (same widths and batch): the tied
    search's proxies."""
    return gpt_network(a, dict(sizes_of(a), layers=blocks), a.batch_size, name="gpt").model


def build(a):
    net = gpt_network(a, sizes_of(a), a.batch_size, name="gpt")
    set_recompute(net.model, recompute_segments(net.model, getattr(a, "recompute", "none")))
    return net


def iteration_flops(a, model) -> float:
    """model_flops of the sizes in force; the 96 form when every block of `model` is
    recomputed (--recompute full, or the search chose it), 72 + 24 x the fraction of blocks
    recomputed when the search chose some."""
    s = sizes_of(a)
    blocks = recompute_segments(model, "full")
    done = sum(set(seg) <= set(model.recompute) for seg in blocks)
    return model_flops(a.batch_size, s["seq_len"], s["layers"], s["width"], s["vocab"],
                       recompute=done / len(blocks) if blocks else 0.0)


def add_arguments(p) -> None:
    p.add_argument("--config", choices=list(CONFIGS), default=None,
                   help=f"named sizes (default {DEFAULT}); size flags override them")
    p.add_argument("--recompute", choices=RECOMPUTE, default="none",
                   help="activation recomputation in backward: every block (full), the "
                        "attention operators (selective) or none (default)")
    p.add_argument("--search-whole-graph", action="store_true",
                   help="with --search: search every operator of the full-depth graph, not "
                        "one block's configs tied across blocks on 1- and 2-block proxies "
                        "(the default; docs/large_models.md)")
    add_size_arguments(p, config_sizes(DEFAULT), SMALL)


APP = App("gpt", "GPT", build, per_device_batch=4, small_per_device_batch=4,
          add_arguments=add_arguments, mixed_strategy=mixed_strategy, expert="megatron",
          lr=0.05, model_flops=iteration_flops, recompute_plans=search_plans, search=search)

if __name__ == "__main__":
    exit_frozen(main(APP))          # (no collection at shutdown: apps/scriptgc.py)
