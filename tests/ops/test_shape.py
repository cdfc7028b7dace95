"""flat, reshape, transpose, concat, split: every legal config equals PyTorch."""
import pytest

import parallel_ops.shape  # noqa: F401  (attach builders)
from parallel_ops import ConfigError, Model, ParallelConfig, ShapeError
from parallel_ops.shape import reshape_groups
from taskrt import Machine, Rect
from oracle import assert_matches, legal_configs, random_feeds


def head(m, h):
    """fc over the last axis and a loss, so every value before it gets a gradient."""
    y = m.input("y", h.shape[:-1], dtype="int64")
    m.softmax_cross_entropy(m.linear(h, 3, name="fc"), y, name="loss")
    return m, random_feeds(m, 3, 3)


def one_op(build, shapes):
    """A model: inputs of these shapes (with gradients) -> build(m, *xs) -> head."""
    m = Model("shape", seed=1, dtype="float64")
    xs = [m.input(f"x{k}", s, requires_grad=True) for k, s in enumerate(shapes)]
    return head(m, build(m, *xs))


# -- reshape and flat ------------------------------------------------------------------------
def flat_net():
    return one_op(lambda m, x: m.flat(x, name="op"), [(5, 3, 2, 2)])


def merge_batch_net():      # (5, 3, 2) -> (15, 2): n splits in units of 3 rows
    return one_op(lambda m, x: m.reshape(x, (-1, 2), name="op"), [(5, 3, 2)])


def split_axis_net():       # (4, 6) -> (4, 2, 3): a1 splits input axis 1 in units of 3
    return one_op(lambda m, x: m.reshape(x, (4, 2, -1), name="op"), [(4, 6)])


def unit_axes_net():        # (4, 1, 3, 2) -> (4, 3, 1, 2): size-1 axes move
    return one_op(lambda m, x: m.reshape(x, (4, 3, 1, 2), name="op"), [(4, 1, 3, 2)])


@pytest.mark.parametrize("ishape, oshape, dims", [
    ((5, 3, 2, 2), (5, 12), [("n", 5, 0, 1, 0, 1), ("a1", 3, 1, 1, 1, 4)]),
    ((5, 3, 2), (15, 2), [("n", 5, 0, 1, 0, 3), ("a1", 2, 2, 1, 1, 1)]),
    ((4, 6), (4, 2, 3), [("n", 4, 0, 1, 0, 1), ("a1", 2, 1, 3, 1, 1)]),
    ((4, 2, 3), (4, 3, 2), [("n", 4, 0, 1, 0, 1)]),            # (2, 3) -> (3, 2): no rects
    ((6, 4), (2, 12), [("n", 2, 0, 3, 0, 1)]),
    ((4, 1, 3, 2), (4, 3, 1, 2), [("n", 4, 0, 1, 0, 1), ("a1", 3, 2, 1, 1, 1),
                                  ("a3", 2, 3, 1, 3, 1)]),
])
def test_reshape_dims(ishape, oshape, dims):
    m = Model()
    op = m.op(m.reshape(m.input("x", ishape), oshape).producer.name)
    got = [(d.name, d.extent, *u) for d, u in zip(op.dims, op.units)]
    assert got == dims          # (dim, extent, input axis, input unit, output axis, unit)


def test_reshape_refuses_splits_without_rects():
    m, _ = one_op(lambda m, x: m.reshape(x, (4, 3, 2), name="op"), [(4, 2, 3)])
    with pytest.raises(ConfigError, match=r"reshape 'op' config .*unknown dim 'a1'; reshape "
                                          r"has dims n:sample"):
        m.compile(Machine.local(4), {"op": ParallelConfig.of([0, 1], a1=2)})


def test_reshape_groups_skip_size_one_axes():
    assert reshape_groups((4, 1, 6), (4, 2, 1, 3)) == [([0], [0]), ([2], [1, 3])]


def test_merged_batch_part_reads_whole_rows():
    m, _ = merge_batch_net()
    spec = m.op("op").part((2, 1), (1, 0))       # n in 2 parts of 5: [3, 5) -> rows [9, 15)
    assert spec.inputs == (Rect((3, 0, 0), (5, 3, 2)),)
    assert spec.outputs == (Rect((9, 0), (15, 2)),)


@pytest.mark.parametrize("net", [merge_batch_net, split_axis_net, unit_axes_net])
def test_reshape_every_config(net):
    for cfg in legal_configs(net()[0].op("op"), 4, max_configs=12):
        m, feeds = net()
        assert_matches(m, feeds, {"op": cfg})


@pytest.mark.parametrize("cfg", legal_configs(flat_net()[0].op("op"), 4), ids=str)
def test_flat_every_config(cfg):
    m, feeds = flat_net()
    assert_matches(m, feeds, {"op": cfg, "fc": ParallelConfig.of([2, 3], i=2)})


# -- transpose --------------------------------------------------------------------------------
def transpose_net(d0=0, d1=2):
    return one_op(lambda m, x: m.transpose(x, d0, d1, name="op"), [(3, 2, 2)])


def test_transpose_dims_follow_output_axes():
    op = transpose_net()[0].op("op")
    assert [str(d) for d in op.dims] == ["a0:attribute", "a1:attribute", "n:sample"]
    assert op.labels["inputs"] == (("n", "a1", "a0"),)


@pytest.mark.parametrize("cfg", legal_configs(transpose_net()[0].op("op"), 4), ids=str)
def test_transpose_every_config(cfg):
    m, feeds = transpose_net()
    assert_matches(m, feeds, {"op": cfg})


def test_transpose_negative_axes():
    for cfg in legal_configs(transpose_net(-1, -2)[0].op("op"), 4, max_configs=6):
        m, feeds = transpose_net(-1, -2)
        assert_matches(m, feeds, {"op": cfg})


# -- concat -----------------------------------------------------------------------------------
def concat_net():           # x0 twice: [x0 | x1 | x0] on axis 1
    return one_op(lambda m, a, b: m.concat([a, b, a], 1, name="op"), [(3, 2, 2), (3, 1, 2)])


def concat_batch_net():
    return one_op(lambda m, a, b: m.concat([a, b], 0, name="op"), [(3, 2), (2, 2)])


def test_concat_part_reads_pieces_of_two_inputs():
    op = concat_net()[0].op("op")
    spec = op.part((1, 2, 1), (0, 0, 0))          # a1 in 2 parts of 5: [0, 3)
    assert spec.inputs == (Rect((0, 0, 0), (3, 2, 2)), Rect((0, 0, 0), (3, 1, 2)))
    assert spec.info == ((0, 0, 2), (1, 0, 1))
    spec = op.part((1, 2, 1), (0, 1, 0))          # [3, 5): only the second x0
    assert spec.inputs[1].empty and spec.inputs[0] == Rect((0, 0, 0), (3, 2, 2))
    spec = op.part((1, 4, 1), (0, 3, 0))          # [4, 5): the last row of the second x0
    assert spec.inputs[0] == Rect((0, 1, 0), (3, 2, 2)) and spec.info == ((0, 0, 1),)


@pytest.mark.parametrize("cfg", legal_configs(concat_net()[0].op("op"), 4), ids=str)
def test_concat_every_config(cfg):
    m, feeds = concat_net()
    assert_matches(m, feeds, {"op": cfg})


def test_concat_on_the_batch_axis():
    for cfg in legal_configs(concat_batch_net()[0].op("op"), 4):
        m, feeds = concat_batch_net()
        assert_matches(m, feeds, {"op": cfg})


# -- split ------------------------------------------------------------------------------------
def split_net(sizes=(2, 3)):
    """x (3, 5, 2) -> split on axis 1 -> concat of the pieces reversed (the last unused when
    there are three) -> head."""
    def build(m, x):
        pieces = m.split(x, list(sizes) if not isinstance(sizes, int) else sizes, 1, name="op")
        return m.concat(pieces[:2][::-1], 1, name="cat")
    return one_op(build, [(3, 5, 2)])


def test_split_outputs_and_parts():
    m, _ = split_net(2)
    op = m.op("op")
    assert [t.shape for t in op.outputs] == [(3, 2, 2), (3, 2, 2), (3, 1, 2)]
    spec = op.part((1, 3, 1), (0, 1, 0))          # input [2, 4): all of the second piece
    assert [r.empty for r in spec.outputs] == [True, False, True]


@pytest.mark.parametrize("cfg", legal_configs(split_net()[0].op("op"), 4), ids=str)
def test_split_every_config(cfg):
    m, feeds = split_net()
    assert_matches(m, feeds, {"op": cfg, "cat": ParallelConfig.of([1, 0], a1=2)})


def test_split_with_an_unused_piece():
    for cfg in legal_configs(split_net(2)[0].op("op"), 4, max_configs=8):
        m, feeds = split_net(2)
        assert_matches(m, feeds, {"op": cfg})


# -- errors -----------------------------------------------------------------------------------
def test_shape_errors():
    m = Model()
    x = m.input("x", (4, 3, 2))
    with pytest.raises(ShapeError, match=r"reshape 'r': cannot reshape 'x' of shape "
                                         r"\(4, 3, 2\) \(24 elements\) to \(5, 5\) \(25 "
                                         r"elements\). Give a shape with 24 elements"):
        m.reshape(x, (5, 5), name="r")
    with pytest.raises(ShapeError, match=r"shape \(-1, -1\) is not valid"):
        m.reshape(x, (-1, -1))
    with pytest.raises(ShapeError, match=r"cannot infer the -1 of \(5, -1\)"):
        m.reshape(x, (5, -1))
    with pytest.raises(ShapeError, match=r"flat: input 'v' has shape \(4,\)"):
        m.flat(m.input("v", (4,)))
    with pytest.raises(ShapeError, match=r"transpose 't': axis 3 is out of range for a 3-d "
                                         r"tensor. Use an axis in \[-3, 2\]"):
        m.transpose(x, 0, 3, name="t")
    with pytest.raises(ShapeError, match=r"concat 'c': 'z' \(4, 2, 2\) float32 does not fit "
                                         r"'x' \(4, 3, 2\) float32 on axis 2"):
        m.concat([x, m.input("z", (4, 2, 2))], 2, name="c")
    with pytest.raises(ShapeError, match=r"concat 'c0': no tensors"):
        m.concat([], 0, name="c0")
    with pytest.raises(ShapeError, match=r"split 's': sizes \[1, 1\] do not split axis 1 of "
                                         r"'x' \(4, 3, 2\). Give positive sizes summing to 3"):
        m.split(x, [1, 1], 1, name="s")
    with pytest.raises(ShapeError, match=r"split 's2': part size 0 must be positive"):
        m.split(x, 0, 1, name="s2")
