"""Regions planned alike up to the extents of their whole dimensions (taskrt/regionshapes.py):
a one-shot plan with such classes is node for node, rect for rect, the plan with exact classes
only (GENERIC_CLASSES off, the oracle): the same graph digest (nodes, Red+ targets, reduce
inputs, buffers' rects, final valid pieces and sums) and the planned columns the simulator
reads (volumes) equal to the nodes'. On towers of layers of other widths (weights replicated
whole, activations split by samples, and random configs: features split, devices shifted)
and on the small apps under random strategies; each case is checked to have moved plans."""
import random
import warnings

import pytest

from parallel_ops import SGD, Model, lower
from strategy.costs.app_profile import load_app
from taskrt import Machine, plan
from taskrt import regionclasses, regionshapes

from test_graph_golden import digest
from test_group_columns import assert_planned_columns_equal_the_nodes
from test_region_classes import alike_strategy

warnings.simplefilter("ignore")

DEVICES = 4


def widths_tower(widths=(8, 12, 8, 16, 12, 6), batch: int = 8) -> Model:
    """Linear layers of other widths: their weights, activations and gradients ask alike
    but for the extents of the dimensions they do not split."""
    m = Model("widths", seed=0, dtype="float64")
    h = m.input("x", (batch, widths[0]), requires_grad=True)
    y = m.input("y", (batch,), dtype="int64")
    for i, w in enumerate(widths[1:]):
        h = m.relu(m.linear(h, w, name=f"fc{i}"), name=f"act{i}")
    m.softmax_cross_entropy(m.linear(h, 5, name="head"), y, name="loss")
    return m


def tower_strategy(model: Model, seed: int | None) -> dict:
    """Data parallel (seed None), else test_region_classes' alike_strategy (per operator
    one of a few configs: samples split on some devices, features split, none given)."""
    return {} if seed is None else alike_strategy(model, seed)


def plans_both_ways(monkeypatch, launches, machine, initial):
    """(graph with classes up to whole dimensions, the number of members moved, graph with
    exact classes only)."""
    moved = []

    def counting(whole, to):
        got = regionshapes.shifter(whole, to)
        if got is not None:
            moved.append(to)
        return got
    monkeypatch.setattr(regionclasses, "shifter", counting)
    monkeypatch.setattr(regionshapes, "GENERIC_CLASSES", True)
    generic = plan(launches, machine, initial)
    monkeypatch.setattr(regionshapes, "GENERIC_CLASSES", False)
    exact = plan(launches, machine, initial)
    return generic, len(moved), exact


def check(monkeypatch, launches, machine, initial) -> int:
    generic, moved, exact = plans_both_ways(monkeypatch, launches, machine, initial)
    assert digest(generic) == digest(exact)
    assert_planned_columns_equal_the_nodes(generic)
    return moved


@pytest.mark.parametrize("seed", [None, *range(10)])
def test_towers_of_other_widths_plan_as_with_exact_classes(monkeypatch, seed):
    model, machine = widths_tower(), Machine.grid(DEVICES, 1)
    low = lower(model, tower_strategy(model, seed), machine, SGD(lr=0.1, momentum=0.9))
    moved = check(monkeypatch, low.launches, machine, low.initial)
    if seed is None:
        assert moved >= 10          # (weights, their gradients and momenta, activations)


@pytest.mark.parametrize("app,seed,moves", [
    ("inception", None, True), ("inception", 5, True), ("resnet", None, True),
    ("resnet", 2, True), ("nmt", None, True), ("nmt", 5, False), ("transformer", 3, True)])
def test_apps_plan_as_with_exact_classes(monkeypatch, app, seed, moves):
    from mpi.models import random_strategy
    random.seed(0)
    built = load_app(app, ["--small"], devices=DEVICES)
    model, machine = built.model, Machine.grid(DEVICES, 1)
    strategy = {} if seed is None else random_strategy(model, DEVICES, seed)
    low = lower(model, strategy, machine, built.optimizer)
    moved = check(monkeypatch, low.launches, machine, low.initial)
    assert (moved > 0) == moves


def test_initial_pieces_split_along_a_dimension_the_launches_span(monkeypatch):
    """Two regions read and written whole along dimension 1, but given as initial pieces
    split along it at other places: not alike (their copies differ there)."""
    from taskrt import RW, Rect, Region, R
    from taskrt_helpers import launch
    a, b = Region("a", (4, 6), "float32"), Region("b", (4, 10), "float32")
    initial = {}
    launches = []
    for region in (a, b):
        width = region.shape[1]
        half = width // 2
        initial[region] = [(Rect((0, 0), (4, half)), 0),
                           (Rect((0, half), (4, width)), 1)]
        rows = [Rect((0, 0), (2, width)), Rect((2, 0), (4, width))]
        launches.append(launch(f"read_{region.name}", [[(region, r, R)] for r in rows], [2, 3]))
        launches.append(launch(f"write_{region.name}", [[(region, r, RW)] for r in rows], [2, 3]))
    machine = Machine.grid(DEVICES, 1)
    generic, moved, exact = plans_both_ways(monkeypatch, launches, machine, initial)
    assert digest(generic) == digest(exact)
    assert moved == 0
