"""Memory: peak bytes per device for a model with large weights, 4-way parameter
parallelism vs data parallelism on 4 logical devices.

Counted from the buffers the executor allocates (weights, gradients, optimizer state,
activations and their gradients, partial-sum and staging buffers), with temporaries live from
their first to their last user as LocalExecutor runs the graph (taskrt.liveness): a device
holding a quarter of a weight must allocate about a quarter of it, never a full copy.
"""
from __future__ import annotations

from parallel_ops import SGD, Model, ParallelConfig
from taskrt import Machine

DEVICES = 4


def build(width: int, batch: int) -> Model:
    m = Model("wide_mlp", seed=0)
    x = m.input("x", (batch, width))
    y = m.input("y", (batch,), dtype="int64")
    h = m.relu(m.linear(x, width, name="fc1"), name="relu")
    m.softmax_cross_entropy(m.linear(h, 10, name="fc2"), y, name="loss")
    return m


def per_device(model, strategy, keep=None) -> tuple[int, int]:
    trainer = model.compile(Machine.local(DEVICES), strategy, SGD(lr=0.1, momentum=0.9),
                            executor="local", keep=keep)
    by_dev = trainer.executor.store.bytes_per_device()
    return max(by_dev.values()), sum(by_dev.values())


def run(quick: bool = False) -> dict:
    width, batch = (256, 8) if quick else (2048, 32)
    model = build(width, batch)
    devs = list(range(DEVICES))
    dp_max, dp_total = per_device(model, {})
    all_max, all_total = per_device(model, {}, keep="all")
    pp_max, pp_total = per_device(model, {"fc1": ParallelConfig.of(devs, o=DEVICES),
                                          "relu": ParallelConfig.of(devs, a1=DEVICES),
                                          "fc2": ParallelConfig.of(devs, i=DEVICES)})
    weight = 4 * (width * width + width)
    rows = [("largest device, data parallel", f"{dp_max / 1e6:.1f} MB",
             f"fc1 weight {weight / 1e6:.1f} MB (+ its gradient and momentum)"),
            ("largest device, 4-way parameter parallel", f"{pp_max / 1e6:.1f} MB",
             f"{pp_max / dp_max:.2f} of data parallel's (about 1/4 expected)"),
            ("largest device, data parallel, nothing freed", f"{all_max / 1e6:.1f} MB",
             "keep='all': every buffer for the whole iteration (before liveness)")]
    return {"title": f"memory per device ({DEVICES} logical devices)", "rows": rows,
            "data": {"data_parallel": {"max": dp_max, "total": dp_total},
                     "parameter_parallel": {"max": pp_max, "total": pp_total},
                     "data_parallel_nothing_freed": {"max": all_max, "total": all_total},
                     "fc1_weight_bytes": weight}}
