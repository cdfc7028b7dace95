"""A spatially split convolution's edge parts (explicit padding, autograd's path) declare
their saved bytes (Conv2d.saved_state_bytes: the padded input besides the activation's),
equal to parallel_ops.saved_state's measurement on meta tensors for every combination of
wanted gradients, activations that read their input or output, with and without bias: so a
search's random configs neither measure them nor import torch's symbolic shapes (sympy)."""
from __future__ import annotations

import itertools
import random
import warnings

from bench.sim_speed import random_config
from parallel_ops import saved_state
from parallel_ops.conv2d import Conv2d
from parallel_ops.launch_template import points
from strategy.costs.app_profile import load_app

DEVICES = 16


def _padded_parts(app: str, flags: list, rng: random.Random, convs: int = 10):
    """(conv stage, part spec) pairs with explicit padding, under random configs."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = load_app(app, flags, devices=DEVICES)
    stages = [op for op in net.model.ops if isinstance(op, Conv2d)]
    rng.shuffle(stages)
    for op in stages[:convs]:
        for _ in range(3):
            cfg = random_config(op, DEVICES, rng)
            _, specs, _ = points(op, tuple(k for _, k in cfg.degrees), tuple(range(DEVICES)))
            for spec in specs:
                if any(spec.info.explicit) and not spec.inputs[0].empty:
                    yield op, spec


def test_padded_conv_parts_declared_as_measured():
    rng = random.Random(0)
    compared = 0
    for app, flags in (("inception", ["--small"]), ("alexnet", ["--small"]),
                       ("inception", ["--small", "--dtype", "bfloat16"])):
        parts = list(_padded_parts(app, flags, rng))
        for op, spec in rng.sample(parts, min(12, len(parts))):
            before = op.activation
            try:
                for act in (before, "gelu", "relu6", "tanh"):
                    op.activation = act
                    for ig in ((True,), (False,)):
                        for wg in itertools.product((True, False), repeat=len(op.weights)):
                            got = op.saved_state_bytes(spec, ig, wg)
                            if not (ig[0] or wg[0]):
                                assert got is None     # (no graph, or bias alone: measured)
                                continue
                            want = saved_state._measure(op, spec, ig, wg, "meta")
                            assert got == want, (app, op.name, act, ig, wg, spec)
                            compared += 1
            finally:
                op.activation = before
    assert compared >= 200, compared
