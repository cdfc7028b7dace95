"""taskrt.settings: one Settings object, resolved as explicit values, then TASKRT_* variables,
then the defaults; nothing read at import; clear errors for bad values at executor
construction and at an app's start-up."""
import os
import subprocess
import sys

import pytest

from taskrt import Machine, plan
from taskrt.errors import PlanError
from taskrt.executor.local import LocalExecutor
from taskrt.settings import FIELDS, Settings, check_environment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_explicit_then_environment_then_default():
    env = {"TASKRT_SPIN_S": "0.25", "TASKRT_BUCKET_BYTES": "7"}
    s = Settings.resolve({"spin_s": 0.5}, environ=env)
    assert s.spin_s == 0.5                                  # explicit beats the environment
    assert s.bucket_bytes == 7                              # the environment beats the default
    assert s.watchdog_floor_s == FIELDS["watchdog_floor_s"][1] == Settings().watchdog_floor_s
    assert Settings.resolve(s, environ={"TASKRT_SPIN_S": "9"}) is s   # resolved once
    assert Settings.resolve(environ={}) == Settings()


def test_one_default_per_setting():
    # POLL_MAX_S had two defaults (1 ms in the table, by cores in the executor): now one,
    # "derived where used", and the executor derives it (tests/taskrt/test_policies.py).
    assert Settings().poll_max_s is None and FIELDS["poll_max_s"][1] is None


def test_unknown_name_and_bad_values_are_named():
    with pytest.raises(PlanError, match=r"unknown names \['spin'\]"):
        Settings.resolve({"spin": 1})
    with pytest.raises(PlanError, match=r"TASKRT_SPIN_S='-1' is below 0"):
        Settings.resolve(environ={"TASKRT_SPIN_S": "-1"})


@pytest.mark.parametrize("name,raw", [("TASKRT_POLL_MAX_S", "fast"),
                                      ("TASKRT_BUCKET_BYTES", "1.5"),
                                      ("TASKRT_MIN_TEMPORARY_BYTES", "")])
def test_a_bad_value_stops_the_executor_naming_the_variable(monkeypatch, name, raw):
    monkeypatch.setenv(name, raw)
    with pytest.raises(PlanError, match=f"{name}=.*is not an? (integer|number)"):
        check_environment()
    with pytest.raises(PlanError, match=name):
        LocalExecutor(plan([], Machine.local(1)))


def test_nothing_is_read_at_import():
    # A bad value set before import must not break importing the runtime; a value set after
    # import must count (it used to be frozen at import in taskrt.liveness and executor.mpi).
    code = ("import os; import taskrt.liveness as l, taskrt.executor.mpi, strategy.simulator;"
            "os.environ['TASKRT_MIN_TEMPORARY_BYTES'] = '5';"
            "print(l.is_small(4), l.is_small(5))")
    env = dict(os.environ, TASKRT_MIN_TEMPORARY_BYTES="junk", PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["True", "False"]


def test_the_executor_passes_its_settings_to_liveness(monkeypatch):
    from parallel_ops.optim import SGD
    from test_liveness import chain       # (tests/taskrt is on the path under pytest)
    monkeypatch.setenv("TASKRT_MIN_TEMPORARY_BYTES", "0")
    model, _ = chain(depth=2)
    graph = model.compile(Machine.local(2), None, SGD(lr=0.1)).graph
    everything = len(LocalExecutor(graph, keep=None).store.temporaries)
    assert everything > 0
    big = Settings.resolve({"min_temporary_bytes": 1 << 40})   # explicit: env says 0
    ex = LocalExecutor(graph, keep=None, settings=big)
    assert ex.settings is big and ex.store.temporaries == []


def test_an_app_reports_a_bad_value_as_a_usage_error():
    env = dict(os.environ, TASKRT_BUCKET_BYTES="abc")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "apps", "alexnet.py"), "--small",
                        "--iterations", "1"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "TASKRT_BUCKET_BYTES='abc' is not an integer" in r.stderr + r.stdout
    assert "Traceback" not in r.stderr
