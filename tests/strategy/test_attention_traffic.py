"""The cost model's bytes for attention count its kernels' traffic (the batch x heads x s x s
scores and probabilities pass through memory several times), other operators' their parts."""
import warnings

from parallel_ops import Model, SGD
from parallel_ops.lowering import lower
from strategy.costs.work import node_bytes, node_work
from taskrt import Machine, plan

warnings.simplefilter("ignore")
B, S, E, H = 2, 64, 32, 4


def test_attention_counts_its_scores_traffic_and_a_linear_its_parts():
    m = Model("attn", seed=0)
    x = m.input("x", (B, S, E), requires_grad=True)
    m.linear(m.multihead_attention(x, H, causal=True, name="attn"), E, name="fc")
    machine = Machine.local(1)
    low = lower(m, {}, machine, SGD(lr=0.1), training=False)
    g = plan(low.launches, machine, initial=low.initial)
    nodes = {n.launch.name: n for n in g.nodes if n.kind == "task"}
    attn, fc = nodes["attn/fwd"], nodes["fc/fwd"]
    scores = B * H * S * S * 4                       # one float32 s x s tensor per head
    # written by the first product, read and written by the softmax, read by the second
    assert node_work(attn).bytes >= node_bytes(attn) + 4 * scores
    assert node_work(fc).bytes == node_bytes(fc)
