"""The simulator on hand-built graphs: every start and end time computed by hand (in the
comments) from the round numbers of the "lab" machine file (sim_graphs.py) and task times
chosen in a real Profile. Chains, a diamond, FIFO per device in program order, copies
(latency sum + bytes over the slowest link; shared links serialize, opposite directions and
disjoint links overlap; half-duplex links serialize both ways), reductions, all-reduces by
the collective formulas of docs/machines.md, a data-parallel MLP's all-reduces in closed
form, memory capacity, busy time and trace events; and bad machine and profile files.

Lab machine: devices d0..d3 on one switch; d0..d2's links 1 us and 1 GB/s each way, d3's
link 3 us and 0.25 GB/s (the uniform variant: d3 like the others). A transfer a -> b takes
a's link up and b's link down: latency L_a + L_b, bandwidth min(B_a, B_b).
"""
import json
import math
import re

import pytest

from parallel_ops.lowering import lower
from parallel_ops.model import Model
from parallel_ops.optim import SGD
from sim_graphs import HandGraph, lab, lab_dict
from strategy.costs import CostModel, Measurement, Profile, ProfileError
from strategy.machines import MachineFileError, from_dict, load
from strategy.simulator import NodeTimer, simulate, trace_of
from taskrt import plan
from taskrt.taskgraph import ReduceInput

MS = 1e-3
MB = 10**6                       # bytes; 250_000 float32 elements
ELEMS_1MB = MB // 4


def exact(x):
    return pytest.approx(x, rel=1e-12, abs=1e-15)


def run(hg):
    return simulate(hg.graph, hg.model, hg.costs())


def check_times(result, expected):
    """expected: node id -> (start, end), all hand-computed."""
    for node, (s, e) in expected.items():
        assert (result.start[node], result.end[node]) == (exact(s), exact(e)), f"node {node}"


# -- tasks ----------------------------------------------------------------------------------
def test_chain_of_three_tasks_on_one_device():
    hg = HandGraph(lab())
    a = hg.task("A", 0, 1 * MS)
    b = hg.task("B", 0, 2 * MS, [a])
    c = hg.task("C", 0, 0.5 * MS, [b])
    r = run(hg)
    # A 0 -> 1 ms; B 1 -> 3 ms; C 3 -> 3.5 ms
    check_times(r, {a: (0, 1 * MS), b: (1 * MS, 3 * MS), c: (3 * MS, 3.5 * MS)})
    assert r.makespan == exact(3.5 * MS) and r.valid
    assert r.busy == {"device 0": exact(3.5 * MS)}


def diamond(b_seconds, c_seconds):
    """A on d0; B on d0 after A; C on d1 after A's 1 MB output is copied d0 -> d1; D on d0
    after B and after C's 1 MB output is copied back d1 -> d0."""
    hg = HandGraph(lab())
    out_a, out_c = hg.region("a", ELEMS_1MB), hg.region("c", ELEMS_1MB)
    a = hg.task("A", 0, 1 * MS)
    to_c = hg.copy(out_a, 0, 1, [a])
    b = hg.task("B", 0, b_seconds, [a])
    c = hg.task("C", 1, c_seconds, [to_c])
    back = hg.copy(out_c, 1, 0, [c])
    d = hg.task("D", 0, 0.5 * MS, [b, back])
    return hg, (a, to_c, b, c, back, d)


# Each copy: 1 us + 1 us latency + 1 MB / 1 GB/s = 1.002 ms.
# A 0 -> 1; copy 1 -> 2.002; B 1 -> 1 + b; C 2.002 -> 2.002 + c; copy back
# 2.002 + c -> 3.004 + c; D at max(1 + b, 3.004 + c) for 0.5 (ms).
@pytest.mark.parametrize("b,c,d_start", [
    (2 * MS, 3 * MS, 6.004 * MS),     # C's branch ends at 6.004, B's at 3: D waits for C
    (7 * MS, 3 * MS, 8 * MS),         # B's branch ends at 8, C's at 6.004: D waits for B
], ids=["C slower", "B slower"])
def test_diamond_waits_for_the_slower_branch(b, c, d_start):
    hg, (a, to_c, bn, cn, back, d) = diamond(b, c)
    r = run(hg)
    check_times(r, {a: (0, 1 * MS), to_c: (1 * MS, 2.002 * MS), bn: (1 * MS, 1 * MS + b),
                    cn: (2.002 * MS, 2.002 * MS + c), back: (2.002 * MS + c, 3.004 * MS + c),
                    d: (d_start, d_start + 0.5 * MS)})
    assert r.makespan == exact(d_start + 0.5 * MS)


def test_independent_tasks_are_fifo_on_one_device_and_overlap_on_two():
    hg = HandGraph(lab())
    first, second = hg.task("long", 0, 3 * MS), hg.task("short", 0, 1 * MS)
    # program order, not shortest first: long 0 -> 3, short 3 -> 4
    r = run(hg)
    check_times(r, {first: (0, 3 * MS), second: (3 * MS, 4 * MS)})
    assert r.makespan == exact(4 * MS)

    hg = HandGraph(lab())
    first, second = hg.task("long", 0, 3 * MS), hg.task("short", 1, 1 * MS)
    r = run(hg)
    check_times(r, {first: (0, 3 * MS), second: (0, 1 * MS)})
    assert r.makespan == exact(3 * MS)


def test_a_device_serves_its_nodes_in_program_order_even_when_idle():
    # Q (d0) waits 5 ms for P (d1); R (d0) is ready at 0 but comes after Q in program order,
    # so d0 stays idle until Q has run: Q 5 -> 6, R 6 -> 8 (ms). This static order is what
    # makes delta simulation exact (simulator.py's docstring).
    hg = HandGraph(lab())
    p = hg.task("P", 1, 5 * MS)
    q = hg.task("Q", 0, 1 * MS, [p])
    r_ = hg.task("R", 0, 2 * MS)
    r = run(hg)
    check_times(r, {p: (0, 5 * MS), q: (5 * MS, 6 * MS), r_: (6 * MS, 8 * MS)})
    assert r.busy["device 0"] == exact(3 * MS) and r.busy["device 1"] == exact(5 * MS)


# -- copies ---------------------------------------------------------------------------------
def test_copy_time_is_latency_sum_plus_bytes_over_the_slowest_link():
    m = lab()
    assert [l.name for l in m.path(0, 3)] == ["n0/d0-sw>", "n0/d3-sw<"]
    hg = HandGraph(m)
    x = hg.region("x", ELEMS_1MB)
    fast, slow, back = hg.copy(x, 0, 2), hg.copy(x, 1, 3), hg.copy(x, 3, 0)
    r = run(hg)
    # d0 -> d2: 1 + 1 us + 1 MB / 1 GB/s = 1.002 ms
    # d1 -> d3: 1 + 3 us + 1 MB / min(1, 0.25) GB/s = 4.004 ms (d3's link decides)
    # d3 -> d0 uses d3's and d0's links in the other direction: also 4.004 ms, from 0
    check_times(r, {fast: (0, 1.002 * MS), slow: (0, 4.004 * MS), back: (0, 4.004 * MS)})
    assert r.busy["n0/d3-sw<"] == exact(4.004 * MS) and r.busy["n0/d3-sw>"] == \
        exact(4.004 * MS)
    assert "device 0" not in r.busy        # a transfer occupies links, not compute


def test_copies_sharing_a_link_serialize_and_others_overlap():
    hg = HandGraph(lab())
    x = hg.region("x", ELEMS_1MB)
    c1, c2 = hg.copy(x, 0, 2), hg.copy(x, 1, 2)     # both end on d2's link down
    c3 = hg.copy(x, 2, 0)                           # opposite direction: its own resources
    r = run(hg)
    # c1 0 -> 1.002; c2 waits for n0/d2-sw<: 1.002 -> 2.004; c3 0 -> 1.002 (ms)
    check_times(r, {c1: (0, 1.002 * MS), c2: (1.002 * MS, 2.004 * MS), c3: (0, 1.002 * MS)})
    assert r.busy["n0/d2-sw<"] == exact(2.004 * MS)


def test_a_copy_waiting_on_one_link_does_not_hold_the_others_idle():
    """Each link of a route serves its copies in program order on its own: a copy queued on
    its last link has left its first (buffered on the way), so the next copy over that first
    link need not wait for the other link's queue. (Holding every link together, as the
    simulator did before, c3 waited for c2 on d2's link down: 2.004 -> 3.006 ms; an
    all-to-all over the P100 cluster's nodes took 3.5x its links' bound that way.)"""
    hg = HandGraph(lab(uniform=True))
    x = hg.region("x", ELEMS_1MB)
    c1, c2 = hg.copy(x, 0, 2), hg.copy(x, 1, 2)     # both end on d2's link down
    c3 = hg.copy(x, 1, 3)                           # after c2 on d1's link up
    r = run(hg)
    # c1 0 -> 1.002 on d0 up and d2 down; c2 on d1 up 0 -> 1.002, then on d2 down 1.002 ->
    # 2.004; c3 on d1 up 1.002 -> 2.004 (after c2 there) and d3 down at once: 1.002 -> 2.004
    check_times(r, {c1: (0, 1.002 * MS), c2: (1.002 * MS, 2.004 * MS),
                    c3: (1.002 * MS, 2.004 * MS)})
    assert r.busy["n0/d1-sw>"] == exact(2.004 * MS) and "route" not in r.busy


def test_a_half_duplex_link_serializes_both_directions():
    data = lab_dict()
    data["links"].append({"kind": "nvlink", "ends": ["n0/d0", "n0/d1"], "latency": 1e-6,
                          "bandwidth": 1e10, "duplex": False, "name": "bridge"})
    hg = HandGraph(from_dict(data, "bridged"))
    x = hg.region("x", ELEMS_1MB)
    there, back = hg.copy(x, 0, 1), hg.copy(x, 1, 0)
    r = run(hg)
    # one hop over the bridge (fewest links): 1 us + 1 MB / 10 GB/s = 0.101 ms each way,
    # one direction at a time
    check_times(r, {there: (0, 0.101 * MS), back: (0.101 * MS, 0.202 * MS)})
    assert r.busy == {"bridge": exact(0.202 * MS)}


def test_reduction_copy_then_reduce_and_a_same_device_copy():
    hg = HandGraph(lab())
    s = hg.region("s", ELEMS_1MB)
    red = hg.copy(s, 1, 0, reduction=True)
    inputs = (ReduceInput("partial", s.rect), ReduceInput("staged", s.rect, red))
    reduce_ = hg.reduce(s, 0, inputs, [red])
    local = hg.copy(s, 2, 2)
    r = run(hg)
    # redcopy d1 -> d0: 1.002 ms. reduce on d0 moves result + 2 inputs = 3 MB at 1 GB/s
    # plus 1 us launch: 1.002 -> 4.003 ms. A copy within d2 is a memory copy (read + write
    # 2 MB at 1 GB/s + 1 us) on d2's compute: 0 -> 2.001 ms
    check_times(r, {red: (0, 1.002 * MS), reduce_: (1.002 * MS, 4.003 * MS),
                    local: (0, 2.001 * MS)})
    assert r.busy["device 0"] == exact(3.001 * MS) and r.busy["device 2"] == exact(2.001 * MS)


# -- all-reduce -----------------------------------------------------------------------------
# Ring over k devices (collectives.py): 2(k-1) rounds of n/k, a round = the pairs' largest
# path latency + (n/k) * max over links of (pairs on the link / bandwidth). Binary tree in id
# order: up then down, one round per level, whole messages; on the lab machine the parent's
# one link carries both children of a level. The cheapest wins.
@pytest.mark.parametrize("uniform,devices,nbytes,efficiency,expected", [
    # k=2, 1 MB: ring 2 * (2 us + 0.5 MB / 1 GB/s) = 1.004 ms; tree 2 * (2 us + 1 ms)
    (True, (0, 1), MB, 1.0, 1.004 * MS),
    # k=4, 1 MB: ring 6 * (2 us + 0.25 ms) = 1.512 ms; tree 8 us + 6 ms
    (True, (0, 1, 2, 3), MB, 1.0, 1.512 * MS),
    # k=4, 400 B: ring 6 * (2 us + 0.1 us) = 12.6 us; tree: up d3 -> d1 (2 us + 0.4 us),
    # d1, d2 -> d0 on d0's one link (2 us + 0.8 us), down the same: 10.4 us wins
    (True, (0, 1, 2, 3), 400, 1.0, 10.4e-6),
    # efficiency 0.5 doubles the bandwidth term: ring 6 * (2 us + 0.5 ms) = 3.012 ms
    (True, (0, 1, 2, 3), MB, 0.5, 3.012 * MS),
    # slow d3: pairs (2, 3) and (3, 0) have 4 us latency, d3's link 0.25 GB/s:
    # ring 6 * (4 us + 0.25 MB / 0.25 GB/s) = 6.024 ms; tree 2 * (4 us + 4 ms)
    # + 2 * (2 us + 2 ms) = 12.012 ms
    (False, (0, 1, 2, 3), MB, 1.0, 6.024 * MS),
], ids=["ring2", "ring4", "tree4-small", "efficiency", "slow-d3"])
def test_allreduce_time_is_the_collective_formula(uniform, devices, nbytes, efficiency,
                                                  expected):
    data = lab_dict(uniform)
    data["allreduce_efficiency"] = efficiency
    hg = HandGraph(from_dict(data, "lab"))
    g = hg.region("g", nbytes // 4)
    before = hg.task("grad", 0, 1 * MS)
    ar = hg.allreduce(g, devices, [before])
    r = run(hg)
    check_times(r, {ar: (1 * MS, 1 * MS + expected)})


def test_allreduce_holds_its_links_and_one_device_costs_nothing():
    hg = HandGraph(lab(uniform=True))
    g, x = hg.region("g", ELEMS_1MB), hg.region("x", ELEMS_1MB)
    ar = hg.allreduce(g, (0, 1))
    apart = hg.copy(x, 2, 3)          # links of d2 up and d3 down: not the ring's
    shared = hg.copy(x, 0, 2)         # d0's link up: the ring's
    alone = hg.allreduce(g, (2,))
    r = run(hg)
    # ring over 2: 1.004 ms; the copies take 1.002 ms each
    check_times(r, {ar: (0, 1.004 * MS), apart: (0, 1.002 * MS),
                    shared: (1.004 * MS, 2.006 * MS), alone: (0, 0)})
    assert r.busy["n0/d1-sw>"] == exact(1.004 * MS)


def test_allreduce_holds_only_the_links_of_the_algorithm_it_uses():
    data = lab_dict(uniform=True)
    data["links"] += [{"kind": "nvlink", "ends": ["n0/d0", "n0/d1"], "latency": 1e-6,
                       "bandwidth": 1e10, "name": "nv01"},
                      {"kind": "nvlink", "ends": ["n0/d1", "n0/d2"], "latency": 1e-6,
                       "bandwidth": 1e10, "name": "nv12"}]
    hg = HandGraph(from_dict(data, "lab+nvlink"))
    g, x = hg.region("g", 300_000), hg.region("x", 300_000)       # 1.2 MB each
    ar = hg.allreduce(g, (0, 1, 2))
    free_link = hg.copy(x, 0, 3)
    busy_link = hg.copy(x, 2, 0)
    r = run(hg)
    # ring 0 -> 1 (nv01>), 1 -> 2 (nv12>), 2 -> 0 (d2 up, d0 down): latency 2 us, slowest
    # 1 GB/s: 4 rounds of (2 us + 0.4 MB / 1 GB/s) = 1.608 ms. The tree (0 parent of 1, 2:
    # 2 * (2 us + 1.2 ms)) would also use d0's link up, which the ring leaves free: the copy
    # d0 -> d3 runs at once (2 us + 1.2 ms), the copy d2 -> d0 waits for the ring.
    check_times(r, {ar: (0, 1.608 * MS), free_link: (0, 1.202 * MS),
                    busy_link: (1.608 * MS, 2.81 * MS)})
    assert "n0/d0-sw>" not in {l.name for l in hg.model.links_of_allreduce((0, 1, 2), MB)}


def test_data_parallel_mlp_syncs_each_weight_once_by_the_closed_form():
    m = Model("mlp", seed=0)
    x = m.input("x", (16, 64))
    y = m.input("y", (16,), dtype="int64")
    h = m.linear(m.linear(x, 128, name="fc1"), 32, name="fc2")
    m.softmax_cross_entropy(m.linear(h, 10, name="fc3"), y, name="loss")
    mm = lab(uniform=True)
    machine = mm.taskrt_machine()
    lowered = lower(m, {}, machine, SGD(lr=0.1))
    assert {str(c) for c in lowered.configs.values()} == {"[n=4]@0-3"}
    graph = plan(lowered.launches, machine, initial=lowered.initial)
    profile = Profile()
    for n in graph.tasks():
        profile.add(n.cost_key, "X", Measurement(1e-4))
    r = simulate(graph, mm, CostModel(profile))

    weight_bytes = {"fc1.weight": 128 * 64 * 4, "fc1.bias": 128 * 4,
                    "fc2.weight": 32 * 128 * 4, "fc2.bias": 32 * 4,
                    "fc3.weight": 10 * 32 * 4, "fc3.bias": 10 * 4}
    ars = [n for n in graph.nodes if n.kind == "allreduce"]
    assert sorted(n.region.name for n in ars) == sorted(f"{w}@grad" for w in weight_bytes)
    assert all(n.devices == (0, 1, 2, 3) for n in ars)

    def formula(n):
        ring = 6 * (2e-6 + n / 4 / 1e9)                       # 12 us + 1.5 n / B
        tree = 2 * (2e-6 + n / 1e9) + 2 * (2e-6 + 2 * n / 1e9)  # 8 us + 6 n / B
        return min(ring, tree)
    # both algorithms occur: the ring for the weights, the tree for the biases under 889 B
    assert {6 * (2e-6 + n / 4e9) < 8e-6 + 6 * n / 1e9 for n in weight_bytes.values()} == \
        {True, False}
    for n in ars:
        w = n.region.name.removesuffix("@grad")
        assert r.end[n.id] - r.start[n.id] == exact(formula(weight_bytes[w])), w
    total = sum(r.end[n.id] - r.start[n.id] for n in ars)
    assert total == exact(sum(formula(b) for b in weight_bytes.values()))
    assert r.valid and math.isfinite(r.makespan)


# -- memory ---------------------------------------------------------------------------------
# d2 holds an instance of 800_000 B and a partial buffer of 100_000 B (initial data: they
# persist) and stages a reduction copy of `staged` float32 elements from d1's instance (both
# temporaries, live while the copy runs); capacity 1_000_000 B.
@pytest.mark.parametrize("staged,over", [(24_999, None), (25_000, None), (25_001, 4)])
def test_memory_over_capacity_is_invalid(staged, over):
    hg = HandGraph(lab(capacity=1_000_000))
    a, p, s = hg.region("a", 200_000), hg.region("p", 25_000), hg.region("s", staged)
    hg.hold(a, 2)
    hg.hold(p, 2, partial=True)
    hg.graph.initial_valid.update({"a": [(a.rect, (2,))], "p": [(p.rect, (2,))]})
    hg.hold(s, 1)
    hg.task("T", 2, 1 * MS)
    hg.copy(s, 1, 2, reduction=True)
    r = run(hg)
    assert r.memory == {2: 900_000 + 4 * staged, 1: 4 * staged}
    if over is None:
        # T 0 -> 1 ms on d2; the redcopy (at most 100_000 B) 2 us + 0.1 ms: T decides
        assert r.valid and r.over_capacity == {} and r.makespan == exact(1 * MS)
    else:
        assert not r.valid and r.over_capacity == {2: over} and r.makespan == math.inf


# -- busy time and trace --------------------------------------------------------------------
def test_busy_time_and_trace_of_the_diamond():
    hg, (a, to_c, b, c, back, d) = diamond(2 * MS, 3 * MS)
    timer = NodeTimer(hg.model, hg.costs())
    r = simulate(hg.graph, hg.model, timer.costs, timer)
    # device 0: A 1 + B 2 + D 0.5 ms; device 1: C 3 ms; each copy 1.002 ms on its two links
    assert r.busy == {"device 0": exact(3.5 * MS), "device 1": exact(3 * MS),
                      "n0/d0-sw>": exact(1.002 * MS), "n0/d1-sw<": exact(1.002 * MS),
                      "n0/d1-sw>": exact(1.002 * MS), "n0/d0-sw<": exact(1.002 * MS)}
    assert r.utilization()["device 0"] == exact(3.5 / 6.504)
    events = trace_of(hg.graph, r, timer)
    assert sorted((e.node, e.track) for e in events) == sorted([
        (a, "device 0"), (to_c, "n0/d0-sw>"), (to_c, "n0/d1-sw<"), (b, "device 0"),
        (c, "device 1"), (back, "n0/d1-sw>"), (back, "n0/d0-sw<"), (d, "device 0")])
    for e in events:
        assert (e.start, e.end) == (r.start[e.node], r.end[e.node])
    by_node = {e.node: e for e in events}
    assert [by_node[i].name for i in (a, b, c, d)] == ["A[0]", "B[0]", "C[0]", "D[0]"]
    assert by_node[to_c].kind == "copy" and by_node[to_c].nbytes == MB


# -- bad machine and profile files (cases test_machine_model.py and test_costs.py miss) ------
def box(d):
    return d["node_types"]["box"]


@pytest.mark.parametrize("edit,message", [
    (lambda d: box(d).pop("devices"), r"node type 'box': \"devices\" is missing; list the "
                                      r"kind of each device"),
    (lambda d: box(d).update(devices=[]), r"node type 'box': no devices; list at least one"),
    (lambda d: box(d)["links"][0].update(ends=["d0", "d0"]),
     r"link 0 \(pcie d0-d0\): both ends are 'd0'; a link joins two different ends"),
    (lambda d: box(d)["links"][1].update(duplex="yes"),
     r"link 1 \(d1-sw\): \"duplex\" is 'yes'; use true or false"),
    (lambda d: box(d)["links"][1].update(name="two words"),
     r"name 'two words' is not a valid name"),
    (lambda d: box(d)["links"][2].update(bandwidth=float("nan")),
     r"link 2 \(d2-sw\): \"bandwidth\" is nan, not a number; give bytes/s"),
    (lambda d: box(d)["links"][2].update(kind=5),
     r"link 2 \(d2-sw\): \"kind\" must be a link kind such as \"nvlink\""),
    (lambda d: d.update(device_specs=[]), r"\"device_specs\" must map device kinds"),
    (lambda d: d.update(switches=["d0"]), r"switch 'd0': not a valid name"),
    (lambda d: (d.update(switches=["fabric"]), box(d).update(points=["sw", "fabric"])),
     r"node type 'box': point 'fabric' has the name of a global switch; rename it"),
    (lambda d: box(d).update(points=["sw", "sw"]), r"points \['sw', 'sw'\] repeat"),
    (lambda d: d.update(calibration=5), r"\"calibration\" is 5; it must be an object"),
    (lambda d: d.update(name=5), r"top level: \"name\" is 5; use a string"),
])
def test_bad_machine_files_name_the_file_the_place_and_a_fix(tmp_path, edit, message):
    data = lab_dict()
    edit(data)
    path = tmp_path / "lab.json"
    path.write_text(json.dumps(data))
    with pytest.raises(MachineFileError) as e:
        load(path)
    text = str(e.value)
    assert text.startswith(f"machine file {path}: ") and re.search(message, text), text


def test_a_missing_machine_file_says_so(tmp_path):
    with pytest.raises(MachineFileError, match=r"machine file .*nowhere\.json: cannot read "
                                               r"it .*name a preset"):
        load(tmp_path / "nowhere.json")


@pytest.mark.parametrize("content,message", [
    (b'{"format": "soapflow-profile", "version": 1, "times": [',
     r"not a readable profile, the file is corrupt or truncated \(JSONDecodeError"),
    (b"\x92\x01\x02", r"not a soapflow profile \(format 'list', expected 'soapflow-profile'\)"),
    (b'{"format": "soapflow-profile", "version": 0}', r"profile version 0 is not supported"),
    (b'{"format": "soapflow-profile", "version": "1"}', r"profile version '1' is not "
                                                        r"supported"),
    (b'{"format": "soapflow-profile", "version": 1, "work": [[["k"], "many", 1]]}',
     r"malformed profile entry"),
])
def test_bad_profiles_name_the_file(tmp_path, content, message):
    path = tmp_path / "p.profile"
    path.write_bytes(content)
    with pytest.raises(ProfileError, match=re.escape(str(path)) + ": " + message):
        Profile.load(path)
    with pytest.raises(ProfileError, match=r"cannot read the profile \(Is a directory\)"):
        Profile.load(tmp_path)
