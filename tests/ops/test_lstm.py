"""lstm: every legal config (n, h) of a layer equals torch.nn.LSTM(batch_first=True)."""
import pytest
import torch

import parallel_ops.lstm  # noqa: F401  (attaches model.lstm)
from parallel_ops import Adam, Model, ParallelConfig, ShapeError
from oracle import assert_matches, legal_configs, random_feeds

N, T, I, H, CLASSES = 3, 3, 4, 5, 4


def tagger(steps=T):
    m = Model("lstm", seed=1, dtype="float64")
    x = m.input("x", (N, steps, I), requires_grad=True)
    y = m.input("y", (N, steps), dtype="int64")
    h = m.lstm(x, H, name="rnn")
    m.softmax_cross_entropy(m.linear(h, CLASSES, name="fc"), y, name="loss")
    return m, random_feeds(m, 7, CLASSES)


def encoder_decoder(steps=T):
    """An encoder whose final states start a decoder (its output sequence is unused)."""
    m = Model("seq2seq", seed=3, dtype="float64")
    src = m.input("src", (N, steps, I), requires_grad=True)
    tgt = m.input("tgt", (N, steps, I))
    y = m.input("y", (N, steps), dtype="int64")
    _, states = m.lstm(src, H, return_state=True, name="enc")
    dec = m.lstm(tgt, H, state=states, name="dec")
    m.softmax_cross_entropy(m.linear(dec, CLASSES, name="fc"), y, name="loss")
    return m, random_feeds(m, 7, CLASSES)


@pytest.mark.parametrize("cfg", legal_configs(tagger()[0].op("rnn"), 4), ids=str)
def test_lstm_every_config(cfg):
    m, feeds = tagger()
    assert_matches(m, feeds, {"rnn": cfg})


@pytest.mark.parametrize("enc, dec", [
    (ParallelConfig.of([0, 1], n=2), ParallelConfig.of([3, 2], h=2)),
    (ParallelConfig.of([3, 1, 2], h=3), ParallelConfig.of([0, 2, 1, 3], n=2, h=2)),
], ids=str)
def test_initial_and_final_states(enc, dec):
    m, feeds = encoder_decoder()
    assert_matches(m, feeds, {"enc": enc, "dec": dec, "fc": ParallelConfig.of([1, 0], n=2)})


def test_single_step_layers_with_adam():
    m, feeds = encoder_decoder(steps=1)
    strategy = {"enc": ParallelConfig.of([2, 1], h=2), "dec": ParallelConfig.of([3, 0, 1], n=3)}
    assert_matches(m, feeds, strategy, optimizer=Adam(lr=0.01), steps=3)


def test_stack_init_and_reference_equal_torch_lstm():
    m = Model("stack", seed=13, dtype="float32")
    x = m.input("x", (N, T, I))
    out = m.lstm(x, H, num_layers=2, name="rnn")
    assert [o.name for o in m.ops] == ["rnn_l0", "rnn_l1"] and out.shape == (N, T, H)
    torch.manual_seed(13)
    ref = torch.nn.LSTM(I, H, num_layers=2, batch_first=True)
    values = {}
    for k in range(2):
        for ours, theirs in (("weight_ih", "weight_ih"), ("weight_hh", "weight_hh"),
                             ("bias_ih", "bias_ih"), ("bias_hh", "bias_hh")):
            w = m.initial_values[f"rnn_l{k}.{ours}"]
            assert torch.equal(w.reshape(4 * H, -1).squeeze(-1),
                               getattr(ref, f"{theirs}_l{k}").detach())
            values[f"rnn_l{k}.{ours}"] = w
    xv = torch.randn(N, T, I)
    h = xv
    for op in m.ops:
        h = op.reference([h], [values[w.name] for w in op.weights])[0]
    torch.testing.assert_close(h, ref(xv)[0].detach())


def test_steps_are_stages_sharing_weights():
    m, _ = tagger()
    op = m.op("rnn")
    stages = op.stages()
    assert [s.name for s in stages] == ["rnn/step0", "rnn/step1", "rnn/step2"]
    assert all(s.weights == op.weights for s in stages)
    assert [t.name for t in stages[1].inputs] == ["x", "rnn.hidden", "rnn.cell"]
    assert [t.name for t in stages[1].outputs] == ["rnn", "rnn.hidden", "rnn.cell"]
    assert [t.name for t in stages[2].outputs] == ["rnn"]
    spec = stages[2].part((1, 2), (0, 1))
    assert spec.inputs[1].lo == (0, 1, 0) and spec.inputs[1].hi == (N, 2, H)   # all of h_1
    assert spec.inputs[2].lo == (0, 1, 3) and spec.inputs[2].hi == (N, 2, H)   # its c_1 part
    assert spec.outputs[0].lo == (0, 2, 3) and spec.outputs[0].hi == (N, 3, H)


def test_shape_errors():
    m = Model()
    x = m.input("x", (2, 3, 4))
    with pytest.raises(ShapeError, match=r"lstm 'r': input 'v' has shape \(2, 4\); it needs "
                                         r"\(batch, time, features\)"):
        m.lstm(m.input("v", (2, 4)), 5, name="r")
    h0 = m.input("h0", (2, 6))
    with pytest.raises(ShapeError, match=r"initial state 'h0' has shape \(2, 6\); it must be "
                                         r"\(batch, hidden\) = \(2, 5\)"):
        m.lstm(x, 5, state=[(h0, h0)], name="r")
    with pytest.raises(ShapeError, match="give both initial states h0 and c0, or neither"):
        m.lstm(x, 6, state=[(h0, None)], name="r")
    with pytest.raises(ShapeError, match=r"lstm 'r': state gives 1 \(h0, c0\) pairs for 2 "
                                         "layers"):
        m.lstm(x, 6, num_layers=2, state=[(h0, h0)], name="r")
    with pytest.raises(ShapeError, match=r"lstm 'lstm_0': num_layers 0 must be at least 1"):
        m.lstm(x, 6, num_layers=0)
