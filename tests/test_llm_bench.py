"""bench/llm.py's breakdown of a predicted iteration: the compute it lists is the device's
tasks, the communication the copies it takes part in, and what compute does not cover is
the rest of the iteration (on a --small GPT under Megatron t=2, one simulated node)."""
from dataclasses import replace

import pytest

from apps.gpt import APP
from apps.simulate import predict
from apps.startup import optimizer, setup
from bench.llm import breakdown, breakdown_text
from strategy.experts import megatron

pytestmark = pytest.mark.filterwarnings("ignore::strategy.costs.CostWarning")


def test_breakdown_of_megatron_on_a_small_gpt():
    s = setup(APP, ["--small", "--machine", "dgx-a100:1", "--batch-size", "8", "--optimizer",
                    "adam", "--simulate"])
    p = predict(APP, replace(s, strategy=megatron(s.network.model, 8, 8, tensor_parallel=2),
                             strategy_name="megatron t=2"), optimizer(s.config))
    b = breakdown(p, device=0)
    r = p.result
    run = r.run if r.run is not None else r.start
    tasks = [n for n in p.graph.nodes if n.kind == "task" and n.device == 0]
    assert b["compute_busy_s"] == pytest.approx(sum(r.end[n.id] - run[n.id] for n in tasks))
    assert b["not_covered_by_compute_s"] == pytest.approx(r.makespan - b["compute_busy_s"])
    assert 0 < b["compute_busy_s"] < r.makespan
    assert any(k.startswith("linear ") for k in b["compute_s"])
    assert b["communication_gb"]["copy inside a node"] > 0
    assert "across nodes" not in " ".join(b["communication_s"])
    assert "not covered by compute" in breakdown_text(b)


def test_recompute_by_block_names_each_blocks_kind():
    from apps.gpt import recompute_segments
    from bench.llm import recompute_by_block
    from parallel_ops.recompute import set_recompute
    model = setup(APP, ["--small", "--layers", "3", "--simulate"]).network.model
    full, selective = recompute_segments(model, "full"), recompute_segments(model, "selective")
    set_recompute(model, [full[0], selective[2]])
    assert recompute_by_block(model) == {"full": 1, "selective": 1, "none": 1}
