"""Lowering keeps equal values once (memory per graph node at 1,024 GPUs): the points of a
data-parallel launch share the requirement on a weight's whole rect and their layout; an
update launch's replicas share one requirements tuple; launches of one domain share their
color tuples. Sharing must not change what a launch asks for (tests/test_graph_golden.py)."""
from parallel_ops import SGD, lower
from taskrt import Machine

from mpi.models import mlp


def lowered(devices=4):
    model, _ = mlp()
    machine = Machine.grid(devices, 1)
    return lower(model, {}, machine, SGD(lr=0.1))


def launch(low, name):
    return next(l for l in low.launches if l.name == name)


def test_data_parallel_points_share_weight_requirements_and_layouts():
    low = lowered()
    for name in ("fc1/fwd", "fc1/bwd"):
        l = launch(low, name)
        first, *rest = [l.requirements(c) for c in l.colors]
        weight = [k for k, r in enumerate(first) if r.region.name == "fc1.weight"]
        assert weight, name
        for reqs in rest:
            for k in weight:
                assert reqs[k] is first[k], f"{name}: point requirement {k} is a copy"
        layouts = [l.args.layouts[c] for c in l.colors]
        assert all(x is layouts[0] for x in layouts), name
    # Layout entries (group, index) are shared by every operator's launches.
    one, other = (launch(low, name).args.layouts[(0, 0, 0)] for name in ("fc1/fwd", "fc2/fwd"))
    assert one == other and all(a is b for a, b in zip(one, other))


def test_forward_and_backward_share_the_input_requirement():
    low = lowered()
    fwd, bwd = launch(low, "fc2/fwd"), launch(low, "fc2/bwd")
    for c in fwd.colors:
        ins = [r for r in fwd.requirements(c) if r.region.name == "fc1"]
        assert ins and any(r is ins[0] for r in bwd.requirements(c))


def test_update_replicas_share_one_requirements_tuple():
    low = lowered()
    update = launch(low, "fc1.weight/update")
    assert len(update.colors) == 4
    tuples = [update.requirements(c) for c in update.colors]
    assert all(t is tuples[0] for t in tuples)


def test_launches_of_one_domain_share_colors():
    low = lowered()
    fc1, fc2 = launch(low, "fc1/fwd"), launch(low, "fc2/bwd")
    assert fc1.domain == fc2.domain and fc1.colors is fc2.colors


def test_shared_groups_make_each_atom_once():
    """_Shared.group on random groups of a pool of atoms: each group's requirements are its
    atoms in order, and an atom is one object on a region wherever it is asked for (the
    first group asking makes it), whichever path (first group, group again, new group)."""
    import random

    from parallel_ops.launch_template import Interned
    from parallel_ops.lowering import _Shared
    from taskrt import Rect, Region
    from taskrt.privilege import Privilege

    rng = random.Random(0)
    pool = [(Rect((a, 0), (a + w, 3)), p) for a in range(6) for w in (1, 2)
            for p in (Privilege.READ, Privilege.REDUCE_SUM)]
    for _ in range(50):
        shared, interned, seen = _Shared(), Interned(), {}
        regions = [Region(f"r{k}", (8, 3), "float32") for k in range(2)]
        for _ in range(rng.randint(1, 12)):
            atoms = rng.sample(pool, rng.randint(1, 6))
            group = interned.group(tuple(r for r, _ in atoms),
                                   tuple(p.code for _, p in atoms))
            region = rng.choice(regions)
            got = shared.group(region, group)
            assert [(q.region, q.rect, q.privilege) for q in got] == \
                [(region, r, p) for r, p in atoms]
            for q, (r, p) in zip(got, atoms):
                assert seen.setdefault((region.name, r, p), q) is q
