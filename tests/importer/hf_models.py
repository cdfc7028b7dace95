"""Tiny Hugging Face transformers models from configs (no download), the batches their
users feed, eager PyTorch training of them, and strategies for their imported versions.

Each entry of HF_MODELS: build(dtype, dropout) -> (module, inputs), inputs being the
keyword arguments users pass (input_ids, attention_mask, labels); strategies(n) ->
{name: strategy over the imported model's operator names} for n devices (n >= 2).
"""
from __future__ import annotations

import os

import torch

from harness import eager_steps
from parallel_ops import ParallelConfig

os.environ.setdefault("HF_HUB_OFFLINE", "1")
try:
    import transformers
    transformers.logging.set_verbosity_error()
except ImportError:          # the test extras install it (setup.py)
    transformers = None

BATCH, SEQ = 4, 6


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _tokens(vocab, seed, pad_from=None):
    """input_ids, attention_mask (the last rows padded from `pad_from` on, if given)."""
    ids = torch.randint(1, vocab, (BATCH, SEQ), generator=_gen(seed))
    mask = torch.ones_like(ids)
    if pad_from is not None:
        for row, start in enumerate(pad_from):
            mask[row, start:] = 0
            ids[row, start:] = 0
    return ids, mask


def gpt2(dtype=torch.float64, dropout=0.0, attn="sdpa"):
    cfg = transformers.GPT2Config(vocab_size=17, n_positions=8, n_embd=8, n_layer=2, n_head=2,
                                  resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout,
                                  bos_token_id=0, eos_token_id=0, attn_implementation=attn)
    torch.manual_seed(9)
    net = transformers.GPT2LMHeadModel(cfg).to(dtype)
    ids, mask = _tokens(17, 10)
    return net, {"input_ids": ids, "attention_mask": mask, "labels": ids.clone()}


def bert(dtype=torch.float64, dropout=0.0, attn="sdpa"):
    cfg = transformers.BertConfig(vocab_size=23, hidden_size=8, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=16,
                                  max_position_embeddings=16, num_labels=3, pad_token_id=0,
                                  hidden_dropout_prob=dropout,
                                  attention_probs_dropout_prob=dropout,
                                  attn_implementation=attn)
    torch.manual_seed(11)
    net = transformers.BertForSequenceClassification(cfg).to(dtype)
    ids, mask = _tokens(23, 12, pad_from=[SEQ, 4, SEQ, 3])
    return net, {"input_ids": ids, "attention_mask": mask,
                 "labels": torch.randint(0, 3, (BATCH,), generator=_gen(13))}


def llama(dtype=torch.float64, dropout=0.0, attn="sdpa"):
    cfg = transformers.LlamaConfig(vocab_size=19, hidden_size=8, intermediate_size=12,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=16,
                                   attention_dropout=dropout, attn_implementation=attn)
    torch.manual_seed(14)
    net = transformers.LlamaForCausalLM(cfg).to(dtype)
    ids, mask = _tokens(19, 15)
    return net, {"input_ids": ids, "attention_mask": mask, "labels": ids.clone()}


def llama_like(cls_name, dtype=torch.float64):
    """A Qwen2 (q/k/v biases) or Mistral causal LM with padded rows: the Llama code paths
    with what they add."""
    cfg = getattr(transformers, cls_name.replace("ForCausalLM", "Config"))(
        vocab_size=19, hidden_size=8, intermediate_size=12, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16)
    torch.manual_seed(16)
    net = getattr(transformers, cls_name)(cfg).to(dtype)
    ids, mask = _tokens(19, 17, pad_from=[SEQ, 4, SEQ, 5])
    return net, {"input_ids": ids, "attention_mask": mask, "labels": ids.clone()}


def torch_steps(net, inputs, optimizer, steps):
    """Losses per step and the final state dict of eager training on the model's own loss
    (a copy of net)."""
    return eager_steps(net, lambda net, step: net(**inputs).loss, optimizer, steps)


def _cfg(devs, **deg):
    return ParallelConfig.of(devs, **deg)


def gpt2_strategies(n):
    d = list(range(n))
    return {"data_parallel": {},
            "mixed": {"transformer.wte": _cfg(d[:2], d=2),
                      "transformer.h.0.ln_1": _cfg(d[:2], n=2),
                      "transformer.h.0.mlp.c_fc": _cfg(d[:2], o=2),
                      "transformer.h.1.attn.c_proj": _cfg(d[-2:], i=2),
                      "lm_head": _cfg(d[::-1][:2], o=2)},
            "attention": {"transformer.h.0.attn.c_attn": _cfg(d[:2], o=2),
                          "transformer.h.1.ln_2": _cfg(d[-2:], s1=2),
                          "lm_head": _cfg(d[:2], i=2)}}


def bert_strategies(n):
    d = list(range(n))
    return {"data_parallel": {},
            "mixed": {"bert.embeddings.word_embeddings": _cfg(d[:2], v=2),
                      "bert.encoder.layer.0.attention.self.query": _cfg(d[:2], o=2),
                      "bert.encoder.layer.0.intermediate.dense": _cfg(d[-2:], o=2),
                      "bert.encoder.layer.1.output.dense": _cfg(d[:2], i=2),
                      "classifier": _cfg(d[:2], i=2)},
            "attention": {"bert.embeddings.LayerNorm": _cfg(d[:2], s1=2),
                          "bert.encoder.layer.1.attention.self.value": _cfg(d[-2:], o=2),
                          "bert.pooler.dense": _cfg(d[:2], o=2)}}


def llama_strategies(n):
    d = list(range(n))
    return {"data_parallel": {},
            "mixed": {"model.embed_tokens": _cfg(d[:2], d=2),
                      "model.layers.0.input_layernorm": _cfg(d[:2], s1=2),
                      "model.layers.0.mlp.gate_proj": _cfg(d[:2], o=2),
                      "model.layers.0.mlp.up_proj": _cfg(d[-2:], o=2),
                      "model.layers.1.mlp.down_proj": _cfg(d[:2], i=2),
                      "lm_head": _cfg(d[::-1][:2], o=2)},
            "attention": {"model.layers.0.self_attn.k_proj": _cfg(d[:2], o=2),
                          "model.layers.1.post_attention_layernorm": _cfg(d[-2:], n=2),
                          "model.norm": _cfg(d[:2], s1=2)}}


HF_MODELS = {"gpt2": (gpt2, gpt2_strategies), "bert": (bert, bert_strategies),
             "llama": (llama, llama_strategies)}

STRATEGY_NAMES = ("data_parallel", "mixed", "attention")
LLAMA_LIKE = ("Qwen2ForCausalLM", "MistralForCausalLM")

# What tests/importer/test_hf_mpi.py trains over `mpirun -np 2` (one job for all): every
# model and attention implementation under data parallel and two model-parallel strategies.
CASES_MPI = [(m, "sdpa", s) for m in (*HF_MODELS, *LLAMA_LIKE) for s in STRATEGY_NAMES] + \
            [("gpt2", "eager", s) for s in STRATEGY_NAMES]


def build_case(name, attn="sdpa"):
    """(module, inputs, strategies) of an HF_MODELS name or a LLAMA_LIKE class name (those
    take Llama's strategies)."""
    if name in HF_MODELS:
        build, strategies = HF_MODELS[name]
        return (*build(attn=attn), strategies)
    return (*llama_like(name), llama_strategies)
