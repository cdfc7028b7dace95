"""Size flags of the sequence apps (a full (paper) and a --small default each) and their
learnable synthetic token streams."""
from __future__ import annotations

import torch

from apps.common import UsageError

_HELP = {"vocab": "vocabulary size", "embed": "embedding width", "hidden": "LSTM hidden units",
         "layers": "layers", "seq_len": "unrolled steps / sequence length",
         "classes": "output classes", "width": "model width", "heads": "attention heads"}


def add_size_arguments(parser, full: dict, small: dict) -> None:
    for key in full:
        parser.add_argument("--" + key.replace("_", "-"), type=int, default=None, metavar="N",
                            help=f"{_HELP.get(key, key)} (default {full[key]}, "
                                 f"{small[key]} with --small)")


def sizes(a, full: dict, small: dict) -> dict:
    """The sizes in force: an explicit flag, else the --small or full default."""
    base = small if a.small else full
    out = {}
    for key in full:
        v = getattr(a, key, None)
        out[key] = base[key] if v is None else v
        if out[key] < 1:
            raise UsageError(f"--{key.replace('_', '-')} {out[key]}: use a positive value.")
    return out


def stream(n: int, length: int, vocab: int, g) -> torch.Tensor:
    """Token streams following t[i+1] = (a t[i] + 1) mod vocab from random starts: a fixed
    permutation a model can learn, so the loss of the synthetic data falls."""
    a = next(p for p in (7, 11, 13, 17, 19, 23) if vocab % p)
    out = torch.empty(n, length, dtype=torch.int64)
    out[:, 0] = torch.randint(0, vocab, (n,), generator=g)
    for i in range(1, length):
        out[:, i] = (out[:, i - 1] * a + 1) % vocab
    return out
