"""Models written as ordinary PyTorch code, and strategies for their imported versions.

Each entry of NETS: build() -> (module, example inputs, labels), and strategies(n) ->
{name: strategy over the imported model's operator names} for n devices.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from examples.vision_blocks import BasicBlock
from parallel_ops import ParallelConfig

DTYPE = torch.float64


class SmallResNet(nn.Module):
    def __init__(self, classes=5):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8),
                                  nn.ReLU())
        self.layer1 = BasicBlock(8, 8)
        self.layer2 = BasicBlock(8, 12, stride=2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(12, classes)

    def forward(self, x):
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(torch.flatten(self.pool(x), 1))


class GPTBlock(nn.Module):
    def __init__(self, d, heads, seq):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.register_buffer("mask", torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1))

    def forward(self, x):
        h = self.ln1(x)
        a, _ = self.attn(h, h, h, attn_mask=self.mask, need_weights=False)
        x = x + a
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab=11, d=8, heads=2, seq=6, layers=2):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, seq, d) * 0.1)
        self.blocks = nn.ModuleList([GPTBlock(d, heads, seq) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class LSTMClassifier(nn.Module):
    def __init__(self, vocab=13, emb=6, hidden=8, classes=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, num_layers=2, batch_first=True)
        self.fc = nn.Linear(hidden, classes)

    def forward(self, tokens):
        _, (h, _) = self.lstm(self.emb(tokens))
        return self.fc(h[-1])


class InceptionBlock(nn.Module):
    def __init__(self, cin, c1, c3r, c3, cp):
        super().__init__()
        self.b1 = nn.Conv2d(cin, c1, 1)
        self.b3 = nn.Sequential(nn.Conv2d(cin, c3r, 1), nn.ReLU(), nn.Conv2d(c3r, c3, 3, padding=1))
        self.bp = nn.Sequential(nn.AvgPool2d(3, 1, 1), nn.Conv2d(cin, cp, 1))
        self.bm = nn.MaxPool2d(3, 1, 1)

    def forward(self, x):
        return F.relu(torch.cat([self.b1(x), self.b3(x), self.bp(x), self.bm(x)], dim=1))


class SmallInception(nn.Module):
    def __init__(self, classes=5):
        super().__init__()
        self.stem = nn.Conv2d(3, 6, 3, padding=1)
        self.mixed = InceptionBlock(6, 4, 3, 5, 2)
        self.bn = nn.BatchNorm2d(17)
        self.fc = nn.Linear(17, classes)

    def forward(self, x):
        x = self.bn(self.mixed(F.relu(self.stem(x))))
        return self.fc(x.mean(dim=(2, 3)))


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def resnet():
    torch.manual_seed(1)
    net = SmallResNet().to(DTYPE)
    g = _gen(2)
    return net, (torch.randn(4, 3, 8, 8, generator=g, dtype=DTYPE),), \
        torch.randint(0, 5, (4,), generator=g)


def gpt():
    torch.manual_seed(3)
    net = TinyGPT().to(DTYPE)
    g = _gen(4)
    return net, (torch.randint(0, 11, (4, 6), generator=g),), \
        torch.randint(0, 11, (4, 6), generator=g)


def lstm_classifier():
    torch.manual_seed(5)
    net = LSTMClassifier().to(DTYPE)
    g = _gen(6)
    return net, (torch.randint(0, 13, (4, 5), generator=g),), \
        torch.randint(0, 4, (4,), generator=g)


def inception():
    torch.manual_seed(7)
    net = SmallInception().to(DTYPE)
    g = _gen(8)
    return net, (torch.randn(4, 3, 6, 6, generator=g, dtype=DTYPE),), \
        torch.randint(0, 5, (4,), generator=g)


def _cfg(devs, **deg):
    return ParallelConfig.of(devs, **deg)


def resnet_strategies(n):
    d = list(range(n))
    return {
        "data_parallel": {},
        "mixed": {"stem.0": _cfg(d[:2], c=2), "stem.1": _cfg(d[:2], c=2),
                  "layer1.conv1": _cfg(d[:2], h=2), "layer1.bn1": _cfg(d[:2], n=2),
                  "layer2.conv1": _cfg(d[-2:], ci=2), "layer2.downsample.0": _cfg(d[:1]),
                  "fc": _cfg(d[:2], o=2), "loss": _cfg(d[-2:], c=2)},
    }


def gpt_strategies(n):
    d = list(range(n))
    return {
        "data_parallel": {},
        "mixed": {"tok": _cfg(d[:2], v=2), "blocks.0.attn": _cfg(d[:2], h=2),
                  "blocks.0.mlp.0": _cfg(d[:2], o=2), "blocks.0.mlp.2": _cfg(d[:2], i=2),
                  "blocks.1.attn": _cfg(d[-2:], n=2), "blocks.1.ln2": _cfg(d[:2], f=2),
                  "head": _cfg(d[-2:], o=2), "loss": _cfg(d[:2], s1=2)},
    }


def lstm_strategies(n):
    d = list(range(n))
    return {
        "data_parallel": {},
        "mixed": {"emb": _cfg(d[:2], d=2), "lstm_l0": _cfg(d[:2], h=2),
                  "lstm_l1": _cfg(d[-1:]), "fc": _cfg(d[:2], i=2)},
    }


def inception_strategies(n):
    d = list(range(n))
    return {
        "data_parallel": {},
        "mixed": {"mixed.b1": _cfg(d[:2], c=2), "mixed.b3.2": _cfg(d[-2:], h=2),
                  "mixed.bp.0": _cfg(d[:2], w=2), "mixed.bm": _cfg(d[:2], c=2),
                  "bn": _cfg(d[:2], c=2), "fc": _cfg(d[:1])},
    }


NETS = {"resnet": (resnet, resnet_strategies), "gpt": (gpt, gpt_strategies),
        "lstm": (lstm_classifier, lstm_strategies), "inception": (inception, inception_strategies)}


class HFLogits(nn.Module):
    """A transformers causal LM returning only its logits (what the importer sees)."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, idx):
        return self.lm(input_ids=idx, use_cache=False, return_dict=False)[0]


def gpt2():
    """A 2-layer GPT-2 from a transformers config (offline), or None without transformers."""
    import os
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import transformers
    except ImportError:
        return None
    transformers.logging.set_verbosity_error()
    cfg = transformers.GPT2Config(vocab_size=17, n_positions=8, n_embd=8, n_layer=2, n_head=2,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                  use_cache=False, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(9)
    net = HFLogits(transformers.GPT2LMHeadModel(cfg)).to(DTYPE)
    g = _gen(10)
    return net, (torch.randint(0, 17, (2, 6), generator=g),), \
        torch.randint(0, 17, (2, 6), generator=g)


def gpt2_strategies(n):
    d = list(range(n))
    return {"mixed": {"lm.transformer.wte": _cfg(d[:2], d=2),
                      "scaled_dot_product_attention": _cfg(d[:2], h=2),
                      "lm.transformer.h.0.mlp.c_fc": _cfg(d[:2], o=2),
                      "lm.transformer.h.1.attn.c_proj": _cfg(d[-2:], i=2),
                      "lm.lm_head": _cfg(d[::-1][:2], o=2)}}
