"""Declared work (parallel_ops Op.work, optimizers' update_work; strategy/costs/formulas.py)
against its oracle, counting on meta tensors (strategy/costs/work.py counted_work): for
every cost key of the apps under random configs (random degrees of every dim, so halos,
split reductions, split rows, replicas and partial sums all occur) and optimizer / dtype
variants, a declared Work equals the counted one exactly (FLOPs, bytes, kernels), so
every simulation and search trajectory is unchanged. A planted wrong formula fails."""
from __future__ import annotations

import collections
import random
import warnings

import pytest
from bench.sim_speed import build_graph, random_config
from parallel_ops.conv2d import Conv2d
from strategy.costs.app_profile import load_app
from strategy.costs.formulas import declared_work
from strategy.costs.work import counted_work
from strategy.machine_model import machine_model
from taskrt.taskgraph import TASK

DEVICES = 4
# (app, flags, random configs): every built-in operator the apps use, SGD and Adam,
# float32 and bfloat16 (master weights, other accumulation dtypes).
CASES = [("inception", ["--small"], 3), ("nmt", ["--small"], 3), ("gpt", ["--small"], 3),
         ("transformer", ["--small"], 3), ("rnnlm", ["--small"], 2),
         ("alexnet", ["--small", "--optimizer", "adam"], 2),
         ("transformer", ["--small", "--dtype", "bfloat16", "--optimizer", "adam"], 2)]


def _type(node) -> str:
    tag = node.launch.cost_tag
    return f"{tag[0] if isinstance(tag[0], str) else tag[0][0]}:{tag[-1]}"


def compare(cases, seed: int = 0, counted=None):
    """(per type: keys declared and equal, per type: keys declared, list of mismatches);
    `counted` (a Counter), if given, gets per type the keys left to counting."""
    rng = random.Random(seed)
    machine = machine_model(f"p100:{DEVICES // 4}").taskrt_machine()
    equal, declared, wrong = collections.Counter(), collections.Counter(), []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for app, flags, configs in cases:
            net = load_app(app, flags, devices=DEVICES)
            seen = set()
            for trial in range(configs):
                strategy = None if trial == 0 else {
                    op.name: random_config(op, DEVICES, rng) for op in net.model.ops}
                graph = build_graph(net.model, strategy, machine, net.optimizer)
                for node in graph.nodes:
                    if node.kind is not TASK or node.cost_key in seen:
                        continue
                    seen.add(node.cost_key)
                    got = declared_work(node)
                    if got is None:
                        if counted is not None:
                            counted[_type(node)] += 1
                        continue
                    declared[_type(node)] += 1
                    want = counted_work(node)
                    if got == want:
                        equal[_type(node)] += 1
                    else:
                        wrong.append((app, node.launch.name, node.cost_key, got, want))
    return equal, declared, wrong


# Every (operator, phase) the apps run that has a declaration.
COVERED = {"conv2d:fwd", "conv2d:bwd", "linear:fwd", "linear:bwd", "max_pool2d:fwd",
           "max_pool2d:bwd", "avg_pool2d:fwd", "avg_pool2d:bwd", "concat:fwd",
           "concat:bwd", "flat:fwd", "flat:bwd", "batchnorm2d.stats:fwd",
           "batchnorm2d.stats:bwd", "batchnorm2d.centered:fwd", "batchnorm2d.centered:bwd",
           "batchnorm2d.normalize:fwd", "batchnorm2d.normalize:bwd",
           "batchnorm2d.running_next:fwd", "batchnorm2d.running_write:fwd",
           "softmax_ce.max:fwd", "softmax_ce.sumexp:fwd", "softmax_ce.loss:fwd",
           "layernorm.stats:fwd", "layernorm.stats:bwd", "layernorm.normalize:fwd",
           "layernorm.normalize:bwd", "embedding:fwd", "embedding:bwd", "add:fwd",
           "add:bwd", "sgd:update", "adam:update", "read:read", "lstm.step:fwd",
           "lstm.step:bwd", "dropout:fwd", "dropout:bwd", "seq_attention:fwd",
           "seq_attention:bwd", "multihead_attention:fwd",
           "multihead_attention:bwd"}


def test_every_declared_work_equals_counting():
    equal, declared, wrong = compare(CASES)
    assert not wrong, wrong[:5]
    missing = COVERED - set(declared)
    assert not missing, f"no key declared for {sorted(missing)}"
    assert sum(equal.values()) >= 1000, equal


def test_a_wrong_declaration_is_caught(monkeypatch):
    real = Conv2d.work

    def one_kernel_too_many(self, phase, spec, plan):
        w = real(self, phase, spec, plan)
        return None if w is None else type(w)(w.flops, w.kernels + 1, w.zeros, w.nones)
    monkeypatch.setattr(Conv2d, "work", one_kernel_too_many)
    _, declared, wrong = compare([("inception", ["--small"], 1)])
    assert declared["conv2d:fwd"] > 0
    assert {n for _, n, *_ in wrong} >= {"Conv2d_1a_3x3/conv/fwd", "Conv2d_1a_3x3/conv/bwd"}


def test_inception_needs_no_counting():
    """Every key of Inception-v3 under random configs is declared: a search over it never
    creates a meta tensor to cost a task."""
    counted = collections.Counter()
    _, declared, wrong = compare([("inception", ["--small"], 3)], seed=2, counted=counted)
    assert not wrong and sum(declared.values()) > 500
    assert not counted, counted
