"""Region classes without requirement indices (regionclasses.py, regionmemo.key_signature):
regions the same launches ask alike under other requirements (an LSTM's weight_ih and
weight_hh, bias_ih and bias_hh, their gradients and momenta) form one class at build time,
and the graph is node for node the one planning every region gives: Red+ targets put
under each member's own requirement indices (a member under other indices than its
template's compiles its own copy of the template's per-access lists, _per_slots), for
one-shot plans (plan(), by columns) and for planners that re-plan (add_launches)."""
import random
import warnings

import pytest

from parallel_ops import SGD, lower
from taskrt import RED, Machine, Planner, plan
from taskrt.errors import PrivilegeError
from taskrt.interference import check_interference

from mpi.models import lstm_model, random_strategy
from taskrt_helpers import launches_of
from test_alike_signatures import MACHINE, REGIONS, TWINS, _program
from test_graph_golden import digest
from test_region_classes import classes_of, plan_region_by_region

warnings.simplefilter("ignore")

DEVICES = 4


def lowered(seed: int):
    model, _ = lstm_model()
    machine = Machine.grid(DEVICES, 1)
    strategy = {} if seed == 0 else random_strategy(model, DEVICES, seed=seed)
    return lower(model, strategy, machine, SGD(lr=0.1, momentum=0.9)), machine


def other_slots(classes) -> set:
    """Names of class members whose accesses are under other requirement indices than
    their class template's somewhere in their logs."""
    return {name for name, (rc, k) in classes.of.items() if rc.slots[k] != rc.slots[0]}


@pytest.mark.parametrize("seed", range(8))
def test_regions_under_other_requirements_plan_once_and_exactly(seed):
    low, machine = lowered(seed)
    classes = classes_of(low.launches, machine, low.initial)
    for layer in ("lstm_l0", "lstm_l1"):
        a, b = (classes.of.get(f"{layer}.{n}", (None,))[0] for n in ("bias_ih", "bias_hh"))
        assert a is b is not None, f"{layer}: bias_ih and bias_hh planned apart"
    assert other_slots(classes), "no member under other requirement indices (vacuous)"
    want = digest(plan_region_by_region(low.launches, machine, low.initial))
    assert digest(plan(low.launches, machine, initial=low.initial)) == want, "one-shot"
    p = Planner(machine, initial=low.initial)
    p.add_launches(low.launches)
    assert digest(p.finish()) == want, "add_launches"


def _paired(program: list) -> list:
    """Each launch's points asking, after their own requirements, each region's twin alike
    (same rect and privilege) under later requirement indices; every other launch's points
    ask the twins first."""
    out = []
    for i, (points, replicas) in enumerate(program):
        twins = [[(TWINS[g], r, p) for g, r, p in reqs] for _, reqs in points]
        out.append(([(d, reqs + t if i % 2 else t + reqs)
                     for (d, reqs), t in zip(points, twins)], replicas))
    return out


def _valid(launches: list, machine) -> list:
    """Those of `launches` whose points do not interfere (interference.py)."""
    out = []
    p = Planner(machine)
    for launch in launches:
        try:
            check_interference(launch, p._expand(launch))
        except PrivilegeError:
            continue
        out.append(launch)
    return out


def test_random_twins_under_other_requirements_plan_as_every_region_alone():
    """Random launches (test_alike_signatures.py's) whose points ask twin regions alike
    under other requirement indices, Red+ included: one-shot plans and add_launches equal
    planning every region on its own."""
    rng = random.Random(1)
    machine = MACHINE
    initial = {g: [(g.rect, 0)] for g in REGIONS + list(TWINS.values())}
    moved = reds = 0
    for trial in range(150):
        launches = _valid(launches_of(_paired(_program(rng)), f"t{trial}"), machine)
        classes = classes_of(launches, machine, initial)
        moved += len(other_slots(classes))
        want = digest(plan_region_by_region(launches, machine, initial))
        assert digest(plan(launches, machine, initial=initial)) == want, \
            f"trial {trial}: one-shot"
        p = Planner(machine, initial=initial)
        p.add_launches(launches)
        assert digest(p.finish()) == want, f"trial {trial}: add_launches"
        reds += sum(req.privilege is RED for launch in launches for c in launch.colors
                    for req in launch.requirements(c))
    assert moved > 100 and reds > 100, (moved, reds)      # (not vacuous)
