"""Both executors skip idle points (taskrt.executor.steps.idle: parallel_ops' empty parts,
e.g. batch norm's statistics stages under a config that splits no sample dim), and get the
same values as when they run them (a single-rank MPIExecutor runs in this process)."""
import pytest
import torch

from parallel_ops import SGD, Model, ParallelConfig
from taskrt import Machine
from taskrt.executor.steps import idle


def _model():
    m = Model("bn", seed=0, dtype="float32")
    x = m.input("x", (4, 6, 5, 5), requires_grad=True)
    y = m.batchnorm2d(x, name="bn", activation="relu")
    m.softmax_cross_entropy(y, m.input("labels", (4, 6, 5), dtype="int64"), name="loss")
    g = torch.Generator().manual_seed(0)
    feeds = {"x": torch.randn(4, 6, 5, 5, generator=g),
             "labels": torch.randint(0, 5, (4, 6, 5), generator=g)}
    return m, feeds


def _counting_calls(graph) -> list:
    """Wrap every launch's task function to record (launch, color) of each call."""
    calls, wrapped = [], {}
    for node in graph.nodes:
        launch = getattr(node, "launch", None)
        if launch is None or id(launch) in wrapped:
            continue
        fn = launch.task

        def task(ctx, *views, fn=fn):
            calls.append((ctx.launch.name, ctx.color))
            return fn(ctx, *views)
        for attr in ("idle", "fresh_outputs"):
            if hasattr(fn, attr):
                setattr(task, attr, getattr(fn, attr))
        task.__name__ = fn.__name__
        launch.task = wrapped[id(launch)] = task
    return calls


@pytest.mark.parametrize("executor", ["local", "mpi"])
def test_executors_skip_idle_points(executor):
    pytest.importorskip("mpi4py")
    m, feeds = _model()
    cfg = {"bn": ParallelConfig.of([1, 0], c=2)}
    reference = m.compile(Machine.local(2), cfg, SGD(lr=0.1), executor="local",
                          record_trace=True)             # tracing runs every point
    ref_loss = reference.step(feeds)
    m, feeds = _model()
    probe = m.compile(Machine.local(2), cfg, SGD(lr=0.1), executor="local")
    graph = probe.graph
    idle_points = {(n.launch.name, n.color) for n in graph.nodes if idle(n)}
    assert idle_points, "the model has no idle points: the test checks nothing"
    m, feeds = _model()
    trainer = m.compile(Machine.local(2), cfg, SGD(lr=0.1), executor=executor)
    # Steps hold their task function from when the executor was built: build another one
    # over the wrapped functions, with the first one's initial data.
    calls = _counting_calls(trainer.graph)
    old = trainer.executor
    new = type(old)(trainer.graph, keep=old.store.keep)
    for name in trainer.graph.initial_valid:
        new.write(name, old.read(name))
    trainer.executor = new
    loss = trainer.step(feeds)
    assert calls and not idle_points & set(calls)
    assert loss == ref_loss
    for name in trainer.graph.initial_valid:          # weights, statistics, momenta
        assert torch.equal(trainer.executor.read(name), reference.executor.read(name)), name
