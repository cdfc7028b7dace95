"""The MPI executor's idle schedule is one decision of the job (taskrt/executor/mpi.py
node_idle_schedule, policies.choose_idle_schedule), read from the node's run queue less the
job's own threads, not from the 1-minute load average (which counts the job's previous
runs and lags a minute: on 2 ranks of 2 cores back-to-back runs hovered around its
threshold, issue 21), and recorded in the traced iteration's load record and the apps'
--json. A single-rank MPIExecutor runs in this process."""
import os

import pytest
import torch

from parallel_ops import SGD, Model
from taskrt import Machine
from taskrt.executor import policies
from taskrt.trace import SCHEDULE


def _model():
    m = Model("mlp", seed=0, dtype="float32")
    x = m.input("x", (4, 6))
    y = m.linear(x, 5, name="fc")
    m.softmax_cross_entropy(y, m.input("labels", (4,), dtype="int64"), name="loss")
    g = torch.Generator().manual_seed(0)
    return m, {"x": torch.randn(4, 6, generator=g), "labels": torch.randint(0, 5, (4,), generator=g)}


def _fake_proc(monkeypatch, runnable_total: int):
    """/proc with `runnable_total` runnable threads, of which this process's one thread."""
    me = os.getpid()

    def read(path):
        if path == "/proc/loadavg":
            return f"5.00 4.00 3.00 {runnable_total}/100 4242"
        return f"{me} (python) R 1 2 3"

    def listdir(path):
        if path != f"/proc/{me}/task":
            raise FileNotFoundError(path)
        return [str(me)]
    monkeypatch.setattr(policies, "_read", read, raising=False)
    monkeypatch.setattr(policies, "_listdir", listdir, raising=False)


def test_the_executor_decides_from_the_run_queue_not_the_load_average(monkeypatch):
    pytest.importorskip("mpi4py")
    import taskrt.executor.mpi as mpi_executor
    # a load average of 5 on 2 cores (the job's previous runs), a run queue of this rank only
    monkeypatch.setattr(policies.os, "getloadavg", lambda: (5.0, 4.0, 3.0))
    monkeypatch.setattr(mpi_executor.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    _fake_proc(monkeypatch, runnable_total=1)
    m, feeds = _model()
    trainer = m.compile(Machine.local(1), {}, SGD(lr=0.1), executor="mpi", record_trace=True)
    ex = trainer.executor
    assert (ex.spin_s, ex.poll_max_s) == (1e-3, 2e-4)       # its core is its own
    assert (ex.schedule.source, ex.schedule.others, ex.schedule.cores) == \
        (policies.RUNNABLE, 0.0, 2)
    trainer.step(feeds)
    assert ex.trace_load[SCHEDULE] == ex.schedule.to_dict()  # the trace keeps it
    # 3 other runnable threads on 2 cores: sleep at once
    _fake_proc(monkeypatch, runnable_total=4)
    m, feeds = _model()
    busy = m.compile(Machine.local(1), {}, SGD(lr=0.1), executor="mpi").executor
    assert (busy.spin_s, busy.poll_max_s, busy.schedule.others) == (0.0, 1e-3, 3.0)


def test_the_apps_json_holds_the_schedule():
    pytest.importorskip("mpi4py")
    from apps.report import idle_schedule
    m, _ = _model()
    trainer = m.compile(Machine.local(1), {}, SGD(lr=0.1), executor="mpi")
    assert idle_schedule(trainer) == trainer.executor.schedule.to_dict()
    m, _ = _model()
    assert idle_schedule(m.compile(Machine.local(1), {}, SGD(lr=0.1), executor="local")) is None
