"""A traced iteration's loop only stamps its events (taskrt.trace.Stamps): no TraceEvent is
made while the nodes run (made there, the events cost a Transformer --small iteration on 2
ranks ~12%, which calibrations then charged to untraced predictions); reading the trace
makes them, one per node with its label, track and times from the iteration's start."""
import pytest
import torch

import taskrt.executor.local as local_executor
import taskrt.trace as trace_module
from parallel_ops import SGD, Model
from taskrt import Machine
from taskrt.trace import node_label, node_track


def _model():
    m = Model("mlp", seed=0, dtype="float32")
    x = m.input("x", (8, 6))
    h = m.linear(x, 5, name="fc1", activation="relu")
    m.softmax_cross_entropy(m.linear(h, 3, name="fc2"), m.input("labels", (8,), dtype="int64"),
                            name="loss")
    g = torch.Generator().manual_seed(0)
    return m, {"x": torch.randn(8, 6, generator=g),
               "labels": torch.randint(0, 3, (8,), generator=g)}


@pytest.mark.parametrize("executor", ["local", "mpi"])
def test_events_are_made_when_the_trace_is_read_not_while_the_nodes_run(executor, monkeypatch):
    if executor == "mpi":
        pytest.importorskip("mpi4py")
    made = []

    class Counted(trace_module.TraceEvent):
        __slots__ = ()

        def __init__(self, *args, **kwargs):
            made.append(args[0])
            super().__init__(*args, **kwargs)

    # wherever an executor could make its events: the trace module and the executors' own
    monkeypatch.setattr(trace_module, "TraceEvent", Counted)
    monkeypatch.setattr(local_executor, "TraceEvent", Counted, raising=False)
    if executor == "mpi":
        import taskrt.executor.mpi as mpi_executor
        monkeypatch.setattr(mpi_executor, "TraceEvent", Counted, raising=False)
    m, feeds = _model()
    trainer = m.compile(Machine.local(2), {}, SGD(lr=0.1), executor=executor, record_trace=True)
    trainer.step(feeds)
    assert made == [], "TraceEvents were made inside the traced iteration"
    events = trainer.executor.trace
    nodes = trainer.graph.nodes
    assert sorted(made) == sorted(n.id for n in nodes)       # one per node, made on reading
    assert trainer.executor.trace is events                  # made once
    for e in events:
        n = nodes[e.node]
        assert (e.kind, e.name, e.track) == (n.kind, node_label(n), node_track(n))
        assert 0 <= e.start <= e.end
    assert all(a.end <= b.start for a, b in zip(events, events[1:]))   # one thread, in order


def test_an_untraced_executor_has_an_empty_trace():
    m, feeds = _model()
    trainer = m.compile(Machine.local(2), {}, SGD(lr=0.1), executor="local")
    trainer.step(feeds)
    assert trainer.executor.trace == []


@pytest.mark.parametrize("executor", ["local", "mpi"])
def test_record_trace_traces_only_the_runs_it_is_told_to(executor):
    """With record_trace, `tracing` False runs an iteration untraced (batched updates, no
    events: apps/training.py times those and traces only the last), True traces it; the
    numbers are an untraced executor's."""
    if executor == "mpi":
        pytest.importorskip("mpi4py")
    m, feeds = _model()
    plain = m.compile(Machine.local(2), {}, SGD(lr=0.1), executor=executor)
    want = [plain.step(feeds) for _ in range(3)]
    m, feeds = _model()
    tr = m.compile(Machine.local(2), {}, SGD(lr=0.1), executor=executor, record_trace=True)
    got, events = [], []
    for tracing in (False, True, False):
        tr.executor.tracing = tracing
        got.append(tr.step(feeds))
        events.append(len(tr.executor.trace))
        if executor == "mpi":       # updates ready together ran as batches, untraced only
            assert (tr.executor.batched > 0) is not tracing
    assert got == want
    n = len(tr.graph.nodes)
    assert events == [0, n, n]          # the trace is the last traced run's
    assert plain.weights().keys() == tr.weights().keys()
    for w, value in plain.weights().items():
        assert torch.equal(tr.weights()[w], value), w


@pytest.mark.parametrize("executor", ["local", "mpi"])
def test_tracing_an_executor_built_without_record_trace_is_refused(executor):
    from taskrt.errors import PlanError
    if executor == "mpi":
        pytest.importorskip("mpi4py")
    m, feeds = _model()
    trainer = m.compile(Machine.local(2), {}, SGD(lr=0.1), executor=executor)
    trainer.executor.tracing = True
    with pytest.raises(PlanError, match="without record_trace: compile with record_trace"):
        trainer.step(feeds)
