"""Delta simulation equals full simulation, exactly, after random sequences of configuration
changes on every app (and on the small test models), on a simulated 4-GPU P100 node."""
import importlib
import random
import warnings

import numpy as np
import pytest

from apps import APPS
from apps.common import make_parser
from strategy.costs import CostModel
from strategy.delta import SimulationSession
from strategy.machine_model import machine_model

from mpi.models import cnn, lstm_model, mlp, random_strategy

warnings.simplefilter("ignore")       # analytic-cost fallback warnings


def app_model(name):
    app = importlib.import_module(f"apps.{name}").APP
    a = make_parser(app).parse_args(["--small", "--batch-size", "8"])
    return app.build(a).model


def check_delta_equals_full(model, changes, seed):
    mm = machine_model("p100:1")
    rng = random.Random(seed)
    strategy = random_strategy(model, 4, seed)
    session = SimulationSession(model, mm, CostModel(), strategy)
    for k in range(changes):
        op = rng.choice(model.ops)
        strategy[op.name] = random_strategy(model, 4, 1000 * seed + k)[op.name]
        got = session.change(op.name, strategy[op.name])
        fresh = SimulationSession(model, mm, CostModel(), dict(strategy))
        assert session.graph.fingerprint() == fresh.graph.fingerprint(), f"change {k}"
        assert got.makespan == fresh.result.makespan, f"change {k}: {op.name}"
        assert np.array_equal(got.start, fresh.result.start)
        assert np.array_equal(got.end, fresh.result.end)
        assert got.memory == fresh.result.memory
        # The object graph simulated on its own (taskrt.liveness over node objects) agrees.
        full = session.full()
        assert got.makespan == full.makespan
        assert np.array_equal(got.start, full.start) and np.array_equal(got.end, full.end)
        assert got.memory == full.memory and got.busy == full.busy


@pytest.mark.parametrize("build", [mlp, cnn, lstm_model], ids=["mlp", "cnn", "lstm"])
def test_delta_equals_full_on_test_models(build):
    check_delta_equals_full(build()[0], changes=6, seed=1)


@pytest.mark.parametrize("name", APPS)
def test_delta_equals_full_on_every_app(name):
    check_delta_equals_full(app_model(name), changes=3, seed=2)
