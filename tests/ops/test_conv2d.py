"""conv2d: every legal config (n, c, h, w, ci splits; groups; halos) equals PyTorch."""
import pytest
import torch

import parallel_ops.conv2d  # noqa: F401  (attaches model.conv2d)
from parallel_ops import Adam, Model, ParallelConfig, ShapeError
from taskrt.geometry import Rect
from oracle import assert_matches, legal_configs, random_feeds

# name -> (input shape, conv2d arguments)
GEOMETRIES = {
    # non-square kernel, stride and padding; every degree up to 4 divides nothing evenly
    "main": ((3, 4, 7, 6), dict(out_channels=5, kernel_size=(3, 2), stride=(2, 1),
                                padding=(1, 1))),
    # c parts straddle groups (3 groups of 3 output channels, 2 input channels each)
    "groups": ((2, 6, 5, 5), dict(out_channels=9, kernel_size=3, padding=1, groups=3)),
    # depthwise, dilated, padding wider than the kernel: some parts read only padding
    "depthwise": ((2, 2, 3, 5), dict(out_channels=4, kernel_size=(1, 3), stride=(1, 2),
                                     padding=(2, 1), dilation=(1, 2), groups=2)),
    "no_bias": ((2, 3, 6, 4), dict(out_channels=4, kernel_size=2, stride=2, bias=False)),
    # the last window ends a row (and a column) before the input: last parts read to the end
    "tail": ((2, 3, 8, 8), dict(out_channels=4, kernel_size=(1, 3), stride=2)),
}


def conv_model(geometry="main", dtype="float64"):
    shape, kw = GEOMETRIES[geometry]
    m = Model("conv", seed=1, dtype=dtype)
    x = m.input("x", shape, requires_grad=True)
    y = m.conv2d(x, name="conv", **kw)
    labels = m.input("labels", y.shape[:3], dtype="int64")
    m.softmax_cross_entropy(y, labels, name="loss")     # over the output's last axis
    return m, random_feeds(m, 3, y.shape[3])


def configs(geometry, max_configs=None):
    return legal_configs(conv_model(geometry)[0].op("conv"), 4, max_configs=max_configs)


@pytest.mark.parametrize("cfg", configs("main"), ids=str)
def test_every_config(cfg):
    m, feeds = conv_model("main")
    assert_matches(m, feeds, {"conv": cfg})


@pytest.mark.parametrize("cfg", configs("groups"), ids=str)
def test_groups_every_config(cfg):
    m, feeds = conv_model("groups")
    assert_matches(m, feeds, {"conv": cfg})


@pytest.mark.parametrize("cfg", configs("depthwise"), ids=str)
def test_depthwise_dilated_every_config(cfg):
    m, feeds = conv_model("depthwise")
    assert_matches(m, feeds, {"conv": cfg})


@pytest.mark.parametrize("cfg", configs("no_bias", max_configs=24), ids=str)
def test_no_bias(cfg):
    m, feeds = conv_model("no_bias")
    assert_matches(m, feeds, {"conv": cfg})


def test_halo_rects_and_padding_per_part():
    op = conv_model("main")[0].op("conv")        # H=7 -> 4 output rows, kernel 3, stride 2
    degrees = (1, 1, 2, 1, 1)
    top, bottom = op.part(degrees, (0, 0, 0, 0, 0)), op.part(degrees, (0, 0, 1, 0, 0))
    assert top.inputs[0] == Rect((0, 0, 0, 0), (3, 4, 4, 6))        # rows -1..3, clipped
    assert top.info.pad == (1, 1, 1, 0)
    assert bottom.inputs[0] == Rect((0, 0, 3, 0), (3, 4, 7, 6))     # rows 3..7, clipped
    assert bottom.info.pad == (1, 1, 0, 1)
    # F.conv2d pads the top part itself (its last window ends before the bottom padding);
    # the bottom part's rows need an explicit bottom pad (symmetric would shift them).
    assert (top.info.padding, top.info.explicit) == ((1, 1), (0, 0, 0, 0))
    assert (bottom.info.padding, bottom.info.explicit) == ((0, 1), (0, 0, 0, 1))


def test_ci_split_gives_partial_sums_and_bias_once():
    op = conv_model("main")[0].op("conv")
    specs = [op.part((1, 1, 1, 1, 2), (0, 0, 0, 0, k)) for k in (0, 1)]
    assert all(s.partial for s in specs)
    assert [s.weights[1].empty for s in specs] == [False, True]
    assert [s.inputs[0].lo[1] for s in specs] == [0, 2]


def test_parts_reading_only_padding():
    m, feeds = conv_model("depthwise")
    op = m.op("conv")
    assert op.part((1, 1, 4, 1, 1), (0, 0, 0, 0, 0)).inputs[0].empty
    assert_matches(m, feeds, {"conv": ParallelConfig.of([2, 0, 3, 1], h=4)})


def test_straddling_part_reads_each_groups_ci_range():
    op = conv_model("groups")[0].op("conv")      # 3 groups: out 3 each, in 2 each
    spec = op.part((1, 2, 1, 1, 2), (0, 1, 0, 0, 1))   # out channels 5..9, ci 1
    assert (spec.inputs[0].lo[1], spec.inputs[0].hi[1]) == (3, 6)
    assert (spec.info.span, spec.info.front, spec.info.back, spec.info.group_in) == (2, 2, 0, 2)


def test_mixed_with_adam_and_three_steps():
    m, feeds = conv_model("groups")
    assert_matches(m, feeds, {"conv": ParallelConfig.of([3, 0, 2, 1], c=2, w=2)},
                   optimizer=Adam(lr=0.01), steps=3)


@pytest.mark.parametrize("kw", [dict(), dict(groups=2, bias=False),
                                dict(kernel_size=(1, 3), dilation=2, groups=4)], ids=str)
def test_init_equals_torch(kw):
    kw = {"kernel_size": 3, **kw}
    torch.manual_seed(7)
    ref = torch.nn.Conv2d(4, 6 if kw.get("groups") != 4 else 8, **kw)
    m = Model(seed=7)
    x = m.input("x", (1, 4, 5, 5))
    m.conv2d(x, ref.out_channels, name="c", **kw)
    assert torch.equal(m.initial_values["c.weight"], ref.weight.detach())
    if ref.bias is not None:
        assert torch.equal(m.initial_values["c.bias"], ref.bias.detach())
    else:
        assert "c.bias" not in m.initial_values


def test_float32_matches_torch():
    m, feeds = conv_model("main", dtype="float32")
    assert_matches(m, feeds, {"conv": ParallelConfig.of([1, 2, 3, 0], n=2, ci=2)},
                   rtol=1e-5, atol=1e-6)


def test_shape_errors():
    m = Model()
    x = m.input("x", (2, 6, 5, 5))
    with pytest.raises(ShapeError, match=r"conv2d 'a': input 'v' has shape \(2, 6\); it "
                                         r"needs 4 axes"):
        m.conv2d(m.input("v", (2, 6)), 4, 3, name="a")
    with pytest.raises(ShapeError, match=r"conv2d 'b': groups 4 must divide both the input "
                                         r"channels \(6\) and out_channels \(8\)\. Use a "
                                         r"common divisor such as 2"):
        m.conv2d(x, 8, 3, groups=4, name="b")
    with pytest.raises(ShapeError, match=r"conv2d 'c': kernel \(7, 7\) with dilation \(1, 1\) "
                                         r"and padding \(0, 0\) does not fit input 'x' of "
                                         r"spatial size \(5, 5\)"):
        m.conv2d(x, 4, 7, name="c")
    with pytest.raises(ShapeError, match=r"conv2d 'd': stride \(1, 0\) is not an int or a "
                                         r"pair of ints >= 1"):
        m.conv2d(x, 4, 3, stride=(1, 0), name="d")
    with pytest.raises(ShapeError, match=r"conv2d 'e': padding 'same' is not an int"):
        m.conv2d(x, 4, 3, padding="same", name="e")
    with pytest.raises(ShapeError, match=r"conv2d 'f': out_channels 0 must be a positive"):
        m.conv2d(x, 0, 3, name="f")


@pytest.mark.parametrize("cfg", configs("tail", max_configs=24), ids=str)
def test_last_parts_read_to_the_end(cfg):
    m, feeds = conv_model("tail")
    assert_matches(m, feeds, {"conv": cfg})


def test_a_whole_part_reads_all_of_its_input():
    """Unsplit, a stride-2 convolution whose last window ends before the input does reads
    the whole input (one contiguous buffer), not a strided 7 x 7 corner of it."""
    m, _ = conv_model("tail")
    op = m.op("conv")
    spec = op.part((1,) * len(op.dims), (0,) * len(op.dims))
    assert spec.inputs[0] == Rect((0, 0, 0, 0), (2, 3, 8, 8))
    assert spec.info.padding == (0, 0) and not any(spec.info.explicit)
