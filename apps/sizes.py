"""Size flags of the sequence apps: each has a full (paper) and a --small default."""
from __future__ import annotations

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
            from apps.common import UsageError
            raise UsageError(f"--{key.replace('_', '-')} {out[key]}: use a positive value.")
    return out
