"""A user's own app file, outside the apps package: a two-layer MLP classifier declared with
apps.common.App. The tests run it through the apps' command line (a huge --lr makes its
loss overflow to nan within a few iterations) and through `python -m strategy --app
tests/apps/tiny_app.py` (a file defining APP is a workload like a built-in app)."""
import sys

import torch

from apps.common import App, Network, main
from parallel_ops import Model


def build(config) -> Network:
    m = Model("tiny", seed=config.seed, dtype=config.dtype)
    x = m.input("x", (config.batch_size, 4))
    y = m.input("y", (config.batch_size,), dtype="int64")
    h = m.linear(x, 8, name="fc1", activation="relu")
    m.softmax_cross_entropy(m.linear(h, 3, name="fc2"), y, name="loss")
    fixed = {}
    if config.poison:                          # data with an inf in it
        fixed["x"] = torch.ones(config.batch_size, 4, dtype=getattr(torch, config.dtype))
        fixed["x"][0, 0] = float("inf")
    return Network(m, {"y": 3}, fixed=fixed)


def add_arguments(parser):
    parser.add_argument("--poison", action="store_true", help="feed an inf in the data")


APP = App("tiny", "Tiny MLP", build, per_device_batch=4, small_per_device_batch=4, lr=0.1,
          add_arguments=add_arguments)

if __name__ == "__main__":
    sys.exit(main(APP))
