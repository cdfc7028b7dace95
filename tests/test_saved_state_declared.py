"""Declared saved state (Op.saved_state_bytes) against its oracle, parallel_ops.saved_state's
measurement on meta tensors: for every forward part whose saved bytes a build of the apps
asks for, under random configs (random degrees of every dim: empty parts, split
reductions, replicas), and dtypes, a declaration equals the measurement exactly, so the
memory model and every search are unchanged. A planted wrong declaration fails."""
from __future__ import annotations

import collections
import random
import warnings

import parallel_ops.launch_template as launch_template
from bench.sim_speed import build_graph, random_config
from parallel_ops import saved_state
from parallel_ops.linear import Linear
from strategy.costs.app_profile import load_app
from strategy.machine_model import machine_model

DEVICES = 4
CASES = [("transformer", ["--small"], 3), ("gpt", ["--small"], 3),
         ("inception", ["--small"], 2), ("nmt", ["--small"], 2),
         ("transformer", ["--small", "--dtype", "bfloat16"], 2),
         ("nmt", ["--small", "--dtype", "bfloat16"], 2)]


def _measured(stage, spec, ig, wg) -> int:
    try:
        return saved_state._measure(stage, spec, tuple(ig), tuple(wg), "meta")
    except RuntimeError:
        return saved_state._measure(stage, spec, tuple(ig), tuple(wg), "cpu")


def compare(cases, monkeypatch, seed: int = 0):
    """(per stage type: parts declared, list of mismatches)."""
    asked = []
    real = launch_template.saved_bytes_of_parts

    def record(stage, specs, ig, wg):
        asked.append((stage, stage.training, dict(specs), tuple(ig), tuple(wg)))
        return real(stage, specs, ig, wg)
    monkeypatch.setattr(launch_template, "saved_bytes_of_parts", record)
    monkeypatch.setattr(launch_template, "_TEMPLATES", {})   # each template asks once
    rng = random.Random(seed)
    machine = machine_model(f"p100:{DEVICES // 4}").taskrt_machine()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for app, flags, configs in cases:
            net = load_app(app, flags, devices=DEVICES)
            for trial in range(configs):
                strategy = None if trial == 0 else {
                    op.name: random_config(op, DEVICES, rng) for op in net.model.ops}
                build_graph(net.model, strategy, machine, net.optimizer)
    declared, nonzero, wrong, seen = collections.Counter(), collections.Counter(), [], set()
    for stage, training, specs, ig, wg in asked:
        stage.training = training
        for spec in specs.values():
            key = (id(stage), training, ig, wg, saved_state._part_key(stage, spec))
            if key in seen:
                continue
            seen.add(key)
            got = stage.saved_state_bytes(spec, ig, wg)
            if got is None:
                continue
            declared[stage.type] += 1
            nonzero[stage.type] += got > 0
            want = _measured(stage, spec, ig, wg)
            if got != want:
                wrong.append((stage.name, spec, got, want))
    return declared, nonzero, wrong


COVERED = {"linear", "conv2d", "dropout", "batchnorm2d.stats", "batchnorm2d.centered",
           "layernorm.stats", "layernorm.normalize",
           "flat", "adaptive_avg_pool2d", "embedding", "add",
           "max_pool2d", "avg_pool2d", "concat", "batchnorm2d.normalize",
           "multihead_attention", "lstm.step"}


def test_every_declared_saved_state_equals_measurement(monkeypatch):
    declared, nonzero, wrong = compare(CASES, monkeypatch)
    assert not wrong, wrong[:5]
    # bytes kept besides regions: a GELU's input, a dropout's mask, layer norm's
    # statistics, pooling's indices and padded input
    assert {"linear", "dropout", "layernorm.normalize", "max_pool2d", "avg_pool2d",
            "batchnorm2d.normalize", "batchnorm2d.centered", "multihead_attention",
            "lstm.step"} \
        <= {t for t, n in nonzero.items() if n}, nonzero
    assert not COVERED - set(declared), declared
    assert sum(declared.values()) >= 40, declared


def test_a_wrong_declaration_is_caught(monkeypatch):
    real = Linear.saved_state_bytes

    def one_byte_too_many(self, spec, ig, wg):
        got = real(self, spec, ig, wg)
        return None if got is None else got + 1
    monkeypatch.setattr(Linear, "saved_state_bytes", one_byte_too_many)
    declared, _, wrong = compare([("transformer", ["--small"], 1)], monkeypatch)
    assert declared["linear"] > 0 and len(wrong) == declared["linear"]
