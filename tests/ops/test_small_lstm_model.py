"""A small LSTM language model (embedding -> 2 LSTM layers -> linear -> loss over every time
step) trained under a mixed strategy equals PyTorch step by step: sample, parameter,
reduction and operation parallelism (the two LSTM layers on disjoint devices)."""
import torch
import torch.nn.functional as F

import parallel_ops.embedding  # noqa: F401  (attach model.embedding, model.lstm)
import parallel_ops.lstm  # noqa: F401
from parallel_ops import Model, ParallelConfig, SGD
from taskrt import Machine
from oracle import assert_matches, random_feeds

N, T, VOCAB, EMB, HID, SEED = 4, 3, 11, 4, 5, 17

MIXED = {
    "emb": ParallelConfig.of([3, 0], v=2),                 # reduction: vocabulary rows
    "rnn_l0": ParallelConfig.of([0, 1], n=2),              # sample, on devices 0-1
    "rnn_l1": ParallelConfig.of([3, 2], h=2),              # parameter, on devices 2-3
    "fc": ParallelConfig.of([1, 3, 2, 0], n=2, o=2),       # sample x parameter
    "loss": ParallelConfig.of([2, 0], c=2),                # classes
}


def language_model():
    m = Model("rnnlm", seed=SEED, dtype="float64")
    tokens = m.input("tokens", (N, T), dtype="int64")
    nxt = m.input("next", (N, T), dtype="int64")
    h = m.lstm(m.embedding(tokens, VOCAB, EMB, name="emb"), HID, num_layers=2, name="rnn")
    m.softmax_cross_entropy(m.linear(h, VOCAB, name="fc"), nxt, name="loss")
    return m, random_feeds(m, 2, VOCAB)


def test_mixed_strategy_equals_op_references():
    m, feeds = language_model()
    assert_matches(m, feeds, MIXED, steps=3)


def test_mixed_strategy_equals_torch_modules():
    """Trained alongside torch.nn.Embedding, LSTM(num_layers=2) and Linear seeded alike."""
    assert not set(MIXED["rnn_l0"].devices) & set(MIXED["rnn_l1"].devices)
    m, feeds = language_model()
    trainer = m.compile(Machine.local(4), MIXED, SGD(lr=0.5, momentum=0.9))
    torch.manual_seed(SEED)
    emb = torch.nn.Embedding(VOCAB, EMB).double()
    rnn = torch.nn.LSTM(EMB, HID, num_layers=2, batch_first=True).double()
    fc = torch.nn.Linear(HID, VOCAB).double()
    params = {"emb.weight": emb.weight, "fc.weight": fc.weight, "fc.bias": fc.bias}
    for k in range(2):
        for w in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            params[f"rnn_l{k}.{w}"] = getattr(rnn, f"{w}_l{k}")
    opt = torch.optim.SGD([*emb.parameters(), *rnn.parameters(), *fc.parameters()], lr=0.5,
                          momentum=0.9)
    for step in range(3):
        loss = trainer.step(feeds)
        opt.zero_grad()
        logits = fc(rnn(emb(feeds["tokens"]))[0])
        want = F.cross_entropy(logits.reshape(-1, VOCAB), feeds["next"].reshape(-1))
        want.backward()
        opt.step()
        assert abs(loss - want.item()) < 1e-9, f"step {step}: loss {loss} vs {want.item()}"
        ours = trainer.weights()
        for name, p in params.items():
            torch.testing.assert_close(ours[name].reshape(p.shape), p.detach(), rtol=1e-7,
                                       atol=1e-9, msg=f"step {step}: weight {name}")
