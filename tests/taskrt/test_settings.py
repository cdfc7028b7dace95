"""TASKRT_* environment numbers: defaults, parsing, and clear errors for bad values, at
executor construction and at an app's start-up (not at import)."""
import os
import subprocess
import sys

import pytest

from taskrt import Machine, plan
from taskrt.errors import PlanError
from taskrt.executor.local import LocalExecutor
from taskrt.settings import check_environment, env_number

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_defaults_values_and_minimum(monkeypatch):
    monkeypatch.delenv("TASKRT_SPIN_S", raising=False)
    assert env_number("TASKRT_SPIN_S") == 1e-3
    monkeypatch.setenv("TASKRT_SPIN_S", "0.25")
    assert env_number("TASKRT_SPIN_S") == 0.25
    monkeypatch.setenv("TASKRT_SPIN_S", "-1")
    with pytest.raises(PlanError, match=r"TASKRT_SPIN_S='-1' is below 0"):
        env_number("TASKRT_SPIN_S")
    assert env_number("TASKRT_SPIN_S", strict=False) == 1e-3


@pytest.mark.parametrize("name,raw", [("TASKRT_POLL_MAX_S", "fast"),
                                      ("TASKRT_BUCKET_BYTES", "1.5"),
                                      ("TASKRT_MIN_TEMPORARY_BYTES", "")])
def test_a_bad_value_stops_the_executor_naming_the_variable(monkeypatch, name, raw):
    monkeypatch.setenv(name, raw)
    with pytest.raises(PlanError, match=f"{name}=.*is not an? (integer|number)"):
        check_environment()
    with pytest.raises(PlanError, match=name):
        LocalExecutor(plan([], Machine.local(1)))


def test_an_app_reports_a_bad_value_as_a_usage_error():
    env = dict(os.environ, TASKRT_BUCKET_BYTES="abc")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "apps", "alexnet.py"), "--small",
                        "--iterations", "1"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "TASKRT_BUCKET_BYTES='abc' is not an integer" in r.stderr + r.stdout
    assert "Traceback" not in r.stderr


def test_poll_back_off_is_shorter_when_each_rank_has_a_core(monkeypatch):
    from taskrt.executor import mpi

    def node_of(ranks):
        monkeypatch.setattr(mpi, "local_rank_and_size", lambda comm: (0, ranks))
    monkeypatch.setattr(mpi.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    node_of(2)
    assert mpi.default_poll_max_s(None) == 2e-4
    node_of(4)                              # oversubscribed: leave the cores to computing ranks
    assert mpi.default_poll_max_s(None) == 1e-3
