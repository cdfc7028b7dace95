"""max/avg/adaptive-avg pooling: every legal config (n, c, h, w splits; halos) equals PyTorch."""
import pytest
import torch

import parallel_ops.pool2d  # noqa: F401  (attaches the pooling builders)
from parallel_ops import Model, ParallelConfig, ShapeError
from taskrt.geometry import Rect
from oracle import assert_matches, legal_configs, random_feeds

# name -> (builder, arguments); the input is (3, 4, 7, 8)
CASES = {
    "max": ("max_pool2d", dict(kernel_size=3, stride=2, padding=1)),
    "max_rect": ("max_pool2d", dict(kernel_size=(3, 2), stride=(1, 3), padding=(1, 0))),
    "avg_incl_pad": ("avg_pool2d", dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 1))),
    "avg_excl_pad": ("avg_pool2d", dict(kernel_size=3, stride=(2, 3), padding=1,
                                        count_include_pad=False)),
    "avg_default_stride": ("avg_pool2d", dict(kernel_size=2)),
    "adaptive": ("adaptive_avg_pool2d", dict(output_size=(3, 5))),      # windows overlap
    "adaptive_keep_h": ("adaptive_avg_pool2d", dict(output_size=(None, 3))),
    "global": ("adaptive_avg_pool2d", dict(output_size=1)),
    "adaptive_even": ("adaptive_avg_pool2d", dict(output_size=(7, 4))),
}
FULL = ("max", "avg_incl_pad", "avg_excl_pad", "adaptive", "global")


def pool_model(case, shape=(3, 4, 7, 8), dtype="float64"):
    kind, kw = CASES[case]
    m = Model("pool", seed=1, dtype=dtype)
    x = m.input("x", shape, requires_grad=True)
    y = getattr(m, kind)(x, name="pool", **kw)
    labels = m.input("labels", y.shape[:3], dtype="int64")
    m.softmax_cross_entropy(y, labels, name="loss")     # over the output's last axis
    return m, random_feeds(m, 3, y.shape[3])


def cases_and_configs():
    out = []
    for case in CASES:
        op = pool_model(case)[0].op("pool")
        out += [(case, c) for c in legal_configs(op, 4, max_configs=None if case in FULL
                                                 else 16)]
    return out


@pytest.mark.parametrize("case,cfg", cases_and_configs(), ids=str)
def test_every_config(case, cfg):
    m, feeds = pool_model(case)
    assert_matches(m, feeds, {"pool": cfg})


def test_output_shapes_equal_torch():
    x = torch.zeros(3, 4, 7, 8)
    torch_fns = {"max_pool2d": torch.nn.functional.max_pool2d,
                 "avg_pool2d": torch.nn.functional.avg_pool2d,
                 "adaptive_avg_pool2d": torch.nn.functional.adaptive_avg_pool2d}
    for case, (kind, kw) in CASES.items():
        ours = pool_model(case)[0].op("pool").outputs[0].shape
        assert ours == tuple(torch_fns[kind](x, **kw).shape), case


def test_halo_and_border_padding():
    op = pool_model("max")[0].op("pool")         # H=7: 4 output rows, kernel 3, stride 2
    top, bottom = (op.part((1, 1, 2, 1), (0, 0, k, 0)) for k in (0, 1))
    assert top.inputs[0] == Rect((0, 0, 0, 0), (3, 4, 4, 8))         # rows -1..3, clipped
    assert bottom.inputs[0] == Rect((0, 0, 3, 0), (3, 4, 7, 8))
    assert (top.info.pad, bottom.info.pad) == ((1, 0, 1, 0), (1, 0, 0, 1))
    assert (top.info.padding, top.info.explicit) == ((1, 1), (0, 0, 0, 0))
    assert (bottom.info.padding, bottom.info.explicit) == ((0, 1), (0, 0, 0, 1))


def test_count_exclude_pad_divisors_at_borders():
    op = pool_model("avg_excl_pad")[0].op("pool")    # kernel 3, stride (2, 3), padding 1
    spec = op.part((1, 1, 2, 1), (0, 0, 1, 0))       # output rows 2, 3 of 4; cols 0..2
    assert spec.info.counts == ((3, 2), (2, 3, 3))


def test_adaptive_reads_only_its_windows():
    op = pool_model("adaptive")[0].op("pool")        # H=7 -> 3 rows: [0,3) [2,5) [4,7)
    spec = op.part((1, 1, 3, 1), (0, 0, 1, 0))
    assert (spec.inputs[0].lo[2], spec.inputs[0].hi[2]) == (2, 5)
    assert spec.info.rows == ((0, 3),) and spec.info.kernel is None
    assert pool_model("global")[0].op("pool").part((2, 1, 1, 1), (1, 0, 0, 0)).info.kernel \
        == (7, 8)


def test_float32_matches_torch():
    m, feeds = pool_model("avg_excl_pad", dtype="float32")
    assert_matches(m, feeds, {"pool": ParallelConfig.of([2, 0, 3], h=3)}, rtol=1e-5, atol=1e-6)


def test_shape_errors():
    m = Model()
    x = m.input("x", (2, 3, 5, 5))
    with pytest.raises(ShapeError, match=r"max_pool2d 'a': padding \(2, 2\) exceeds half the "
                                         r"kernel \(3, 3\); PyTorch allows at most \(1, 1\)"):
        m.max_pool2d(x, 3, padding=2, name="a")
    with pytest.raises(ShapeError, match=r"avg_pool2d 'b': kernel \(6, 6\) with padding "
                                         r"\(0, 0\) does not fit input 'x' of spatial size "
                                         r"\(5, 5\)"):
        m.avg_pool2d(x, 6, name="b")
    with pytest.raises(ShapeError, match=r"max_pool2d 'c': input 'v' has shape \(2, 3, 5\); "
                                         r"it needs 4 axes"):
        m.max_pool2d(m.input("v", (2, 3, 5)), 2, name="c")
    with pytest.raises(ShapeError, match=r"adaptive_avg_pool2d 'd': output_size \(0, 2\) is "
                                         r"not an int or a pair of ints >= 1"):
        m.adaptive_avg_pool2d(x, (0, 2), name="d")
    with pytest.raises(ShapeError, match=r"avg_pool2d 'e': stride 0 is not an int"):
        m.avg_pool2d(x, 2, stride=0, name="e")
