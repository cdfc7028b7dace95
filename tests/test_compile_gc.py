"""Compiling a model runs no garbage collection: what lowering, planning and the executor's
set-up allocate lives as long as the trainer, so a collection mid-compile only walks it
(taskrt.gcpause; it was ~half of Inception-v3 --small's compile CPU)."""
import gc

from parallel_ops import SGD, Model, ParallelConfig
from taskrt import Machine


def test_compile_runs_no_collection_and_leaves_the_collector_on():
    m = Model("gc_mlp", seed=0)
    h = m.input("x", (8, 16))
    labels = m.input("labels", (8,), dtype="int64")
    for i in range(6):
        h = m.relu(m.linear(h, 16, name=f"fc{i}"), name=f"relu{i}")
    m.softmax_cross_entropy(m.linear(h, 4, name="out"), labels, name="loss")
    strategy = {op.name: ParallelConfig.of([0, 1], n=2) for op in m.ops}
    collections = []

    def count(phase, info):
        if phase == "start":
            collections.append(info["generation"])

    assert gc.isenabled()
    gc.callbacks.append(count)
    try:
        m.compile(Machine.local(2), strategy, SGD(lr=0.1))
    finally:
        gc.callbacks.remove(count)
    assert collections == [], f"collections during compile, by generation: {collections}"
    assert gc.isenabled()
