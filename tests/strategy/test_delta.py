"""Delta simulation equals full simulation, exactly, after random sequences of configuration
changes on every app (and on the small test models), on a simulated 4-GPU P100 node, and
with host costs: on P100s (a host thread per GPU) and on two CPU ranks of two logical
devices each (the thread runs the tasks too)."""
import dataclasses
import random
import warnings

import numpy as np
import pytest

from apps import APPS
from strategy.workload import load_workload
from strategy.costs import CostModel
from strategy.delta import SimulationSession
from strategy.logical_devices import shared
from strategy.machine_model import HostCost, machine_model

from mpi.models import cnn, lstm_model, mlp, random_strategy

warnings.simplefilter("ignore")       # analytic-cost fallback warnings


def app_model(name):
    return load_workload(name).build_from_flags(["--small", "--batch-size", "8"], 1).model


HOST_COSTS = {"task": HostCost(2e-5), "copy": HostCost(5e-6, 1e-10),
              "send": HostCost(1e-5, 2e-10), "recv": HostCost(8e-6, 3e-10),
              "reduce": HostCost(4e-6), "allreduce_start": HostCost(3e-5, 1e-11),
              "allreduce_wait": HostCost(7e-6)}


def p100_with_host():
    return machine_model("p100:1").with_host_costs(HOST_COSTS)


def cpu_ranks_with_host():
    """Two CPU "ranks" (the cluster preset's nodes of one cpu device) of 2 logical devices."""
    from strategy.machines import DEVICE_SPECS, cluster_model
    cpu = dataclasses.replace(DEVICE_SPECS["P100"], kind="cpu")
    return shared(cluster_model("cpus", cpu, 2).with_host_costs(HOST_COSTS), 2)


def check_delta_equals_full(model, changes, seed, machine=None):
    mm = machine() if machine else machine_model("p100:1")
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


@pytest.mark.parametrize("machine", [p100_with_host, cpu_ranks_with_host],
                         ids=["p100-host", "cpu-ranks-host"])
@pytest.mark.parametrize("build", [mlp, cnn, lstm_model], ids=["mlp", "cnn", "lstm"])
def test_delta_equals_full_with_host_costs(build, machine):
    check_delta_equals_full(build()[0], changes=6, seed=3, machine=machine)


@pytest.mark.parametrize("name", ["alexnet", "rnnlm"])
def test_delta_equals_full_with_host_costs_on_apps(name):
    check_delta_equals_full(app_model(name), changes=3, seed=4, machine=cpu_ranks_with_host)
