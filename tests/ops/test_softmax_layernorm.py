"""softmax and layernorm over a splittable last axis: every legal config equals PyTorch; parts
of whole rows take the explicit backward (softmax._RowStage: torch's fused kernels) and
equal the autograd path through both stages under every legal config."""
import pytest
import torch
import torch.nn.functional as F

import parallel_ops.layernorm  # noqa: F401  (attach builders)
import parallel_ops.softmax  # noqa: F401
from parallel_ops import Adam, Model, ParallelConfig, ShapeError
from taskrt import Machine
from oracle import assert_matches, legal_configs, parallel_steps

SHAPE = (4, 3, 5)       # 3 and 5 do not divide by every degree


def net(kind, shape=SHAPE, dtype="float64", **kw):
    """x -> softmax or layernorm -> fc -> loss (x has a gradient)."""
    m = Model(kind, seed=1, dtype=dtype)
    x = m.input("x", shape, requires_grad=True)
    y = m.input("y", shape[:-1], dtype="int64")
    h = getattr(m, kind)(x, name="op", **kw)
    m.softmax_cross_entropy(m.linear(h, 3, name="fc"), y, name="loss")
    g = torch.Generator().manual_seed(3)
    feeds = {"x": 2 + 3 * torch.randn(*shape, generator=g, dtype=torch.float64),
             "y": torch.randint(0, 3, shape[:-1], generator=g)}
    return m, feeds


# -- softmax ----------------------------------------------------------------------------------
def test_softmax_dims_and_stages():
    op = net("softmax")[0].op("op")
    assert [str(d) for d in op.dims] == ["n:sample", "s1:attribute", "c:attribute"]
    assert [s.name for s in op.stages()] == ["op/stats", "op/normalize"]


@pytest.mark.parametrize("cfg", legal_configs(net("softmax")[0].op("op"), 4), ids=str)
def test_softmax_every_config(cfg):
    m, feeds = net("softmax")
    assert_matches(m, feeds, {"op": cfg})


def test_softmax_2d_split_classes():
    for cfg in legal_configs(net("softmax", (3, 7))[0].op("op"), 4, max_configs=6):
        m, feeds = net("softmax", (3, 7))
        assert_matches(m, feeds, {"op": cfg, "fc": ParallelConfig.of([1, 3], i=2)})


def test_softmax_large_logits_float32():
    m = Model("big", dtype="float32")
    m.softmax(m.input("x", (4, 6)), name="op")
    x = 1000 * torch.randn(4, 6, generator=torch.Generator().manual_seed(0))
    tr = m.compile(Machine.local(4), {"op": ParallelConfig.of([3, 1, 2], c=3)}, training=False)
    tr.step({"x": x})
    assert torch.allclose(tr.read("op"), torch.softmax(x, -1), rtol=1e-5, atol=1e-6)


# -- layernorm --------------------------------------------------------------------------------
def test_layernorm_dims_and_weights():
    op = net("layernorm")[0].op("op")
    assert [str(d) for d in op.dims] == ["n:sample", "s1:attribute", "f:parameter"]
    assert [w.shape for w in op.weights] == [(5,), (5,)]
    assert op.stages()[1].weights == op.weights


def test_layernorm_init_draws_like_torch():
    m = Model("init", seed=7)
    x = m.input("x", (2, 4))
    m.linear(m.layernorm(m.linear(x, 5, name="fc1"), name="ln"), 3, name="fc2")
    torch.manual_seed(7)
    mods = [torch.nn.Linear(4, 5), torch.nn.LayerNorm(5), torch.nn.Linear(5, 3)]
    names = ["fc1", "ln", "fc2"]
    for name, mod in zip(names, mods):
        for suffix in ("weight", "bias"):
            assert torch.equal(m.initial_values[f"{name}.{suffix}"], getattr(mod, suffix).data)


@pytest.mark.parametrize("cfg", legal_configs(net("layernorm")[0].op("op"), 4), ids=str)
def test_layernorm_every_config(cfg):
    m, feeds = net("layernorm")
    assert_matches(m, feeds, {"op": cfg})


def test_layernorm_without_affine_and_eps():
    for cfg in legal_configs(net("layernorm", (5, 6))[0].op("op"), 4, max_configs=6):
        m, feeds = net("layernorm", (5, 6), elementwise_affine=False, eps=0.1)
        assert_matches(m, feeds, {"op": cfg})


def test_layernorm_adam_three_steps():
    m, feeds = net("layernorm")
    strategy = {"op": ParallelConfig.of([3, 0, 1, 2], n=2, f=2),
                "fc": ParallelConfig.of([2, 1], s1=2)}
    assert_matches(m, feeds, strategy, optimizer=Adam(lr=0.05), steps=3)


def test_layernorm_float32_large_mean():
    """Per-part moments keep float32 accurate where sums of x and x^2 would cancel."""
    m = Model("big", dtype="float32")
    m.layernorm(m.input("x", (4, 64)), name="op")
    x = 1e4 + torch.randn(4, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    tr = m.compile(Machine.local(4), {"op": ParallelConfig.of([2, 0, 3, 1], f=4)},
                   training=False)
    tr.step({"x": x.float()})
    want = F.layer_norm(x.float().double(), (64,))
    assert torch.allclose(tr.read("op").double(), want, atol=1e-3)


# -- errors -----------------------------------------------------------------------------------
def test_shape_errors():
    m = Model()
    x = m.input("x", (4, 3, 2))
    with pytest.raises(ShapeError, match=r"softmax 's': dim 1 of 'x' \(4, 3, 2\) is not the "
                                         r"last axis.*model.transpose"):
        m.softmax(x, dim=1, name="s")
    with pytest.raises(ShapeError, match=r"layernorm 'l': normalized_shape \(3, 2\) for 'x' "
                                         r"\(4, 3, 2\); only the last axis is supported. Use "
                                         r"normalized_shape=2"):
        m.layernorm(x, (3, 2), name="l")
    with pytest.raises(ShapeError, match=r"softmax 'v': input 'v1' has shape \(4,\); it "
                                         "needs a batch axis and a feature axis"):
        m.softmax(m.input("v1", (4,)), name="v")


# -- the explicit backward of whole rows ---------------------------------------------------------
def _steps(kind, cfg, explicit: bool, counts=None, **kw):
    from parallel_ops.softmax import _RowStage
    m, feeds = net(kind, **kw)
    if not explicit:
        for stage in m.op("op").stages():
            stage.explicit_backward = False
    with pytest.MonkeyPatch.context() as mp:
        if counts is not None:
            real = _RowStage.backward

            def counted(self, *args):
                counts[self.name] = counts.get(self.name, 0) + 1
                return real(self, *args)
            mp.setattr(_RowStage, "backward", counted)
        records, _ = parallel_steps(m, feeds, {"op": cfg})
    return records


@pytest.mark.parametrize("kind,kw", [("softmax", {}), ("layernorm", {}),
                                     ("layernorm", {"elementwise_affine": False})], ids=str)
def test_whole_rows_explicit_backward_equals_autograd_every_config(kind, kw):
    for cfg in legal_configs(net(kind, **kw)[0].op("op"), 4):
        counts: dict = {}
        explicit = _steps(kind, cfg, True, counts, **kw)
        autograd = _steps(kind, cfg, False, **kw)
        last = net(kind, **kw)[0].op("op").dims[-1].name
        whole_rows = cfg.degree(last) == 1
        parts = cfg.num_parts
        assert counts == ({"op/stats": 2 * parts, "op/normalize": 2 * parts} if whole_rows
                          else {}), str(cfg)
        for step, (a, b) in enumerate(zip(explicit, autograd)):
            assert abs(a["loss"] - b["loss"]) <= 1e-9, f"{cfg} step {step}: loss"
            for group in ("values", "grads", "weights"):
                for name in b[group]:
                    assert torch.allclose(a[group][name], b[group][name], rtol=1e-9,
                                          atol=1e-9), f"{cfg} step {step}: {group} {name}"
