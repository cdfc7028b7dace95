"""The explicit backward (Op.explicit_backward) of the operators the importer produces most:
add and multiply (broadcast per-feature operand, a tensor given twice, a fused activation),
reshape, transpose, split (an output without a gradient), the scalar operators, bmm and
embedding (parts of the whole vocabulary; a vocabulary split keeps autograd). Under
every legal config (float64) they give the same bits as the autograd path, and the explicit
path was taken (its backward calls counted)."""
import pytest
import torch

import parallel_ops.shape  # noqa: F401  (attaches the builders)
from parallel_ops import Model
from parallel_ops.elementwise import Elementwise
from parallel_ops.importer.extra_ops import ScalarOp
from parallel_ops.embedding import Embedding
from parallel_ops.matmul import BatchMatmul
from parallel_ops.shape import Reshape, Split, Transpose
from oracle import legal_configs, parallel_steps, random_feeds

SHAPE = (4, 3, 6)


def _model(build):
    m = Model("explicit_shapes", seed=3, dtype="float64")
    x = m.input("x", SHAPE, requires_grad=True)
    y = m.input("y", SHAPE, requires_grad=True)
    b = m.input("b", SHAPE[-1:], requires_grad=True)
    h = build(m, x, y, b)
    h = m.linear(m.reshape(h, (SHAPE[0], -1)), 5, name="fc")
    labels = m.input("labels", (SHAPE[0],), dtype="int64")
    m.softmax_cross_entropy(h, labels, name="loss")
    feeds = random_feeds(m, 7, 5)
    feeds["x"] = feeds["x"].abs() + 0.5            # pow with fractional exponents
    return m, feeds


def _scalar(fn, c):
    return lambda m, x, y, b: m.add_op(ScalarOp(m, x, fn, c, name="op")).outputs[0]


def _split_one_used(m, x, y, b):
    first, _ = m.split(x, [2, 4], axis=2, name="op")
    return m.add(first, first, name="twice")


# name -> (builder of the op under test, its class)
CASES = {
    "add": (lambda m, x, y, b: m.add(x, y, name="op"), Elementwise),
    "add per-feature relu": (lambda m, x, y, b: m.add(x, b, name="op", activation="relu"),
                             Elementwise),
    "multiply": (lambda m, x, y, b: m.multiply(x, y, name="op"), Elementwise),
    "multiply per-feature": (lambda m, x, y, b: m.multiply(x, b, name="op"), Elementwise),
    "multiply x by itself": (lambda m, x, y, b: m.multiply(x, x, name="op"), Elementwise),
    "reshape": (lambda m, x, y, b: m.reshape(x, (4, 18), name="op"), Reshape),
    "transpose": (lambda m, x, y, b: m.transpose(x, 1, 2, name="op"), Transpose),
    "split": (lambda m, x, y, b: m.concat(list(m.split(x, [2, 4], axis=2, name="op")), 2),
              Split),
    "split, one output used": (_split_one_used, Split),
    "bmm": (lambda m, x, y, b: m.bmm(x, m.transpose(y, 1, 2), name="op"), BatchMatmul),
    "bmm, a tensor given twice": (lambda m, x, y, b: m.bmm(x, m.transpose(x, 1, 2),
                                                          name="op"), BatchMatmul),
    "embedding": (lambda m, x, y, b: m.add(x, m.embedding(m.input("ids", SHAPE[:2],
                                                                  dtype="int64"),
                                                          5, SHAPE[2], name="op"), "sum"),
                  Embedding),
    "embedding with padding_idx": (
        lambda m, x, y, b: m.add(x, m.embedding(m.input("ids", SHAPE[:2], dtype="int64"),
                                                5, SHAPE[2], name="op", padding_idx=1),
                                 "sum"), Embedding),
    **{f"scalar {fn}": (_scalar(fn, c), ScalarOp)
       for fn, c in (("add", 2.0), ("sub", 1.5), ("mul", -3.0), ("div", 4.0), ("pow", 3),
                     ("pow", 0.5), ("pow", 0))},
}


def _run(build, cls, cfg, explicit: bool, counts=None):
    m, feeds = _model(build)
    with pytest.MonkeyPatch.context() as mp:
        if not explicit:
            mp.setattr(cls, "explicit_backward", False)
        if counts is not None:
            real = cls.backward

            def counted(self, *args):
                if self.name == "op":
                    counts["op"] = counts.get("op", 0) + 1
                return real(self, *args)
            mp.setattr(cls, "backward", counted)
        records, _ = parallel_steps(m, feeds, {"op": cfg})
    return records


@pytest.mark.parametrize("case", CASES, ids=str)
def test_same_bits_as_autograd_every_config(case):
    build, cls = CASES[case]
    op = _model(build)[0].op("op")
    for cfg in legal_configs(op, 4):
        counts: dict = {}
        explicit = _run(build, cls, cfg, True, counts)
        autograd = _run(build, cls, cfg, False)
        # (a part of split holding only the unused output gets no gradient: zeros, no call)
        taken = counts.get("op", 0)
        if case.startswith("embedding") and cfg.degree("v") > 1:
            assert taken == 0, f"{cfg}: a vocabulary split takes autograd"
        else:
            assert taken == 2 * cfg.num_parts or (case == "split, one output used" and taken), \
                f"{cfg}: explicit path not taken"
        for step, (a, b) in enumerate(zip(explicit, autograd)):
            assert a["loss"] == b["loss"], f"{cfg} step {step}: loss"
            for group in ("values", "grads", "weights"):
                assert a[group].keys() == b[group].keys()
                for name in b[group]:
                    assert torch.equal(a[group][name], b[group][name]), \
                        f"{cfg} step {step}: {group} of {name} differ"
