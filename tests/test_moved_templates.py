"""Moved launch templates (parallel_ops/launch_template.py `_moved_forward`): an LSTM's middle
steps declare themselves step 1 moved along time (Stage.moved), and their forward and backward
templates are made by moving step 1's. On random LSTM layers and configs, each moved template
must equal the one ForwardTemplate builds straight from the step's own part() (points, specs,
atoms and their groups, getters, layouts, initial pieces, saved bytes, weight pieces, and every
kind of backward), and lowering with the declarations equal lowering without them."""
import random

import pytest

from parallel_ops import SGD, Model, lower
from parallel_ops.launch_template import ForwardTemplate, Interned, _moved_forward
from taskrt import Machine

DEVICES = 16


def layer(rng: random.Random):
    """A random one-layer LSTM model: (model, its LSTM operator)."""
    n, steps, fin, hid = (rng.randint(1, 6), rng.randint(3, 7), rng.randint(1, 5),
                          rng.randint(1, 6))
    m = Model("moved", seed=0)
    x = m.input("x", (n, steps, fin), requires_grad=rng.random() < 0.5)
    state = None
    if rng.random() < 0.5:
        grad = rng.random() < 0.5
        state = [(m.input("h0", (n, hid), requires_grad=grad),
                  m.input("c0", (n, hid), requires_grad=grad))]
    out = m.lstm(x, hid, state=state, return_state=rng.random() < 0.5, name="rnn")
    out = out[0] if isinstance(out, tuple) else out
    m.softmax_cross_entropy(out, m.input("y", (n, steps), dtype="int64"), name="loss")
    return m, m.ops[0]


def config(op, rng: random.Random):
    """Random degrees (in the order of op's dims) and distinct devices."""
    degrees, parts = [], 1
    for d in op.dims:
        k = rng.choice([k for k in range(1, d.extent + 1) if parts * k <= DEVICES])
        degrees.append(k)
        parts *= k
    return tuple(degrees), tuple(rng.sample(range(DEVICES), parts))


def requirements(reqs) -> tuple:
    """What a template's _Requirements say: its groups and each point's atoms."""
    numbered = list(range(sum(len(g.rects) for _, _, g in reqs.groups)))
    return ([(s, i, g.rects, g.privileges, g.keys) for s, i, g in reqs.groups],
            [get(numbered) for get in reqs.getters])


def described(t: ForwardTemplate, stage, grads) -> tuple:
    input_grads, weight_grads = grads
    backward = []
    for outs in ((True,) * len(stage.outputs), (True,) + (False,) * (len(stage.outputs) - 1)):
        for recomputed in (False, True):
            bt = t.backward(stage, outs, input_grads, weight_grads, recomputed)
            backward.append((requirements(bt.reqs), bt.layout_of))
    return (t.domain, t.devices, t.colors, t.specs, requirements(t.reqs), t.layout_of,
            t.events, [(k, list(v)) for k, v in t.initial_groups.items()],
            t.held(stage, input_grads, weight_grads),
            [t.pieces(k) for k in range(len(stage.weights))],
            [t.pieces_at(k) for k in range(len(stage.weights))], backward)


@pytest.mark.parametrize("seed", range(60))
def test_moved_templates_equal_templates_made_from_part(seed):
    rng = random.Random(seed)
    model, op = layer(rng)
    stages = op.stages()
    moved = [s for s in stages if s.moved is not None]
    assert len(moved) == max(0, len(stages) - 3)      # all but steps 0, 1 and the last
    for _ in range(3):
        degrees, devices = config(op, rng)
        interned = Interned()
        base = ForwardTemplate(stages[1], degrees, devices, interned)
        grads = (tuple(rng.random() < 0.5 for _ in stages[1].inputs),
                 tuple(rng.random() < 0.7 for _ in stages[1].weights))
        for stage in moved:
            assert stage.moved[0] == 1
            fast = _moved_forward(base, stage)
            straight = ForwardTemplate(stage, degrees, devices, interned)
            assert described(fast, stage, grads) == described(straight, stage, grads)
            # Equal groups are one object (a backward finds its forward's group by identity).
            assert all(a[2] is b[2] for a, b in zip(fast.reqs.groups, straight.reqs.groups))


def launches(model, strategy, declared: bool):
    """Every launch's name, points, devices, specs, layouts, saved bytes and requirements."""
    if not declared:
        for op in model.ops:
            for stage in op.stages():
                stage.moved = None
    low = lower(model, strategy, Machine.grid(4, 4), SGD(lr=0.1))
    assert any(l.name.endswith("step2/bwd") for l in low.launches) or \
        len(model.ops[0].stages()) < 4
    out = []
    for l in low.launches:
        specs = getattr(l.args, "specs", None)
        for c in l.colors:
            out.append((l.name, c, l.devices, specs and specs[c],
                        getattr(l.args, "layouts", None) and l.args.layouts[c],
                        l.saved_bytes and l.saved_bytes.get(c),
                        [(r.region.name, r.rect, r.privilege) for r in l.requirements(c)]))
    return out, {r: sorted(p, key=repr) for r, p in low.initial.items()}


@pytest.mark.parametrize("seed", range(12))
def test_lowering_with_moved_steps_equals_lowering_without(seed):
    from parallel_ops.config import ParallelConfig
    rng = random.Random(seed)
    model, op = layer(rng)
    degrees, devices = config(op, rng)
    strategy = {op.name: ParallelConfig(tuple((d.name, k) for d, k in zip(op.dims, degrees)),
                                        devices)}
    fast = launches(model, strategy, True)
    rng = random.Random(seed)
    model, op = layer(rng)
    assert fast == launches(model, strategy, False)
