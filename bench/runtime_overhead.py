"""Runtime overhead: our training iteration vs the same model as plain PyTorch eager code.

One process, one device, the same torch threads (1), the same weights (our initialization
draws like torch.nn, so the same seed gives the same model), the same loss and SGD. Two CNNs:
many small layers (where per-task costs show) and a few large ones. Timed interleaved, median
per iteration; the ratio ours/PyTorch is the overhead (target: at most 1.10).

Our model writes each conv + ReLU as one operator (conv2d(..., activation="relu"), as
FlexFlow's API does); PyTorch's is nn.Conv2d then nn.ReLU. The small-layer CNN is also
measured with the ReLUs as operators of their own (twice the launches).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from bench._common import interleaved
from parallel_ops import SGD, Model
from taskrt import Machine

SHAPES = {
    # name: (batch, channels in, image size, [(out channels, stride), ...], classes)
    "small layers (16 convs of 8 channels, 16x16)": (16, 8, 16, [(8, 1)] * 16, 10),
    "large layers (3 convs of 64-128 channels, 32x32)": (16, 3, 32, [(64, 1), (128, 2),
                                                                     (128, 1)], 10),
}


# rows: (shape, ReLU fused into its conv?)
ROWS = [(name, True) for name in SHAPES] + [(next(iter(SHAPES)), False)]


def ours(batch, cin, size, layers, classes, device, machine=None, fused=True):
    """The benchmark CNN on our runtime (one local device unless a machine is given); each
    ReLU fused into its conv, or an operator of its own."""
    m = Model("bench", seed=0)
    x = m.input("x", (batch, cin, size, size))
    y = m.input("y", (batch,), dtype="int64")
    h = x
    for cout, stride in layers:
        if fused:
            h = m.conv2d(h, cout, 3, stride=stride, padding=1, activation="relu")
        else:
            h = m.relu(m.conv2d(h, cout, 3, stride=stride, padding=1))
    h = m.flat(m.adaptive_avg_pool2d(h, 1))
    m.softmax_cross_entropy(m.linear(h, classes), y)
    if machine is None:
        return m.compile(Machine.local(1, device), None, SGD(lr=0.01, momentum=0.9),
                         executor="local")
    return m.compile(machine, None, SGD(lr=0.01, momentum=0.9))


def eager(batch, cin, size, layers, classes, device):
    torch.manual_seed(0)
    mods, c = [], cin
    for cout, stride in layers:
        mods += [nn.Conv2d(c, cout, 3, stride=stride, padding=1), nn.ReLU()]
        c = cout
    net = nn.Sequential(*mods, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, classes))
    net = net.to(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, foreach=False)
    return net, opt


def run(quick: bool = False) -> dict:
    torch.set_num_threads(1)
    device = "cuda" if torch.cuda.is_available() and __import__("os").environ.get(
        "SOAPFLOW_BENCH_DEVICE") == "cuda" else "cpu"
    rows, data = [], {}
    for name, fused in ROWS:
        batch, cin, size, layers, classes = SHAPES[name]
        if not fused:
            name += ", ReLU as separate operators"
        if quick:
            layers, size = layers[:2], 8
        g = torch.Generator().manual_seed(0)
        xv = torch.randn(batch, cin, size, size, generator=g)
        yv = torch.randint(0, classes, (batch,), generator=g)
        trainer = ours(batch, cin, size, layers, classes, device, fused=fused)
        net, opt = eager(batch, cin, size, layers, classes, device)
        xd, yd = xv.to(device), yv.to(device)

        def step_ours():
            trainer.step({"x": xv, "y": yv})

        def step_eager():
            opt.zero_grad()
            F.cross_entropy(net(xd), yd).backward()
            opt.step()
            if device == "cuda":
                torch.cuda.synchronize()
        t = interleaved({"ours": step_ours, "pytorch": step_eager}, 3 if quick else 15)
        ratio = t["ours"] / t["pytorch"]
        data[name] = {"ours_ms": 1e3 * t["ours"], "pytorch_ms": 1e3 * t["pytorch"],
                      "ratio": ratio, "tasks": len(trainer.graph.tasks()),
                      "nodes": len(trainer.graph)}
        rows.append((f"{name}: ours / PyTorch eager", f"{ratio:.2f}x",
                     f"{1e3 * t['ours']:.1f} vs {1e3 * t['pytorch']:.1f} ms per iteration, "
                     f"{device}, 1 thread, {len(trainer.graph)} graph nodes; target <= 1.10"))
    return {"title": "runtime overhead (1 device)", "rows": rows, "data": data}
