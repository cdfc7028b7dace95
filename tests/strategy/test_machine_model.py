"""Machine models: presets and their sizes, routes inside and across nodes, transfer and
all-reduce times against closed forms (ring, tree with a shared port, hierarchical across
nodes, the cheapest chosen), taskrt machines, machine files (exact round trips, every
validation error with its fix, corrupt files, no pickle), and calibration of the local
machine in one process and under a real `mpirun -np 2`."""
import copy
import json
import os
import pickle
import re
import sys

import msgpack
import pytest
import torch

from mpi_launch import run_mpi
from strategy.machine_model import (DEVICE_SPECS, DeviceSpec, LinkSpec, MachineFileError,
                                    MachineModel, MachineModelError, NodeType, calibrate_local,
                                    cluster_model, from_bytes, from_dict, load, machine_model,
                                    to_dict)

HERE = os.path.dirname(os.path.abspath(__file__))
MB = 1 << 20
approx = pytest.approx


# -- presets ------------------------------------------------------------------------------
@pytest.mark.parametrize("spec,nodes,per_node,kind", [
    ("p100", 4, 4, "P100"), ("p100-cluster", 4, 4, "P100"), ("P100x4", 4, 4, "P100"),
    ("p100:2", 2, 4, "P100"), ("k80", 16, 4, "K80"), ("k80:3", 3, 4, "K80"),
    ("dgx1", 1, 8, "V100"), ("v100:2", 2, 8, "V100"), ("a100", 1, 8, "A100"),
    ("dgx-a100:2", 2, 8, "A100"), ("h100:4", 4, 8, "H100"), ("h200", 1, 8, "H200"),
    ("selene", 4, 8, "A100"), ("selene:16", 16, 8, "A100")])
def test_preset_sizes(spec, nodes, per_node, kind):
    m = machine_model(spec)
    assert (m.num_nodes, m.devices_per_node, m.num_devices) == (nodes, per_node,
                                                                nodes * per_node)
    assert m.device(m.num_devices - 1) is DEVICE_SPECS[kind]
    assert [m.node_of(d) for d in m.devices_of_node(nodes - 1)] == [nodes - 1] * per_node
    assert str(m).startswith(f"{nodes}x{per_node} {kind} (")


def test_printing_and_datasheet_numbers():
    assert str(machine_model("p100")) == "4x4 P100 (NVLink, 100 Gb/s EDR)"
    assert str(machine_model("k80")) == "16x4 K80 (PCIe switches, 56 Gb/s FDR)"
    p100, k80 = DEVICE_SPECS["P100"], DEVICE_SPECS["K80"]
    assert (p100.fp32_flops, p100.fp16_flops, p100.memory_bandwidth, p100.memory_capacity) == \
        (10.6e12, 21.2e12, 732e9, 16 << 30)
    assert (k80.fp32_flops, k80.memory_bandwidth, k80.memory_capacity) == \
        (4.365e12, 240e9, 12 << 30)
    h100 = DEVICE_SPECS["H100"]
    assert h100.peak_flops("bfloat16") == h100.peak_flops("float16") == 989e12
    assert h100.peak_flops("float32") == 67e12 and p100.peak_flops("float64") == 5.3e12
    assert str(p100) == "P100 10.6/21.2 TFLOP/s fp32/fp16, 732 GB/s, 16 GiB"


def test_bad_preset_names_say_what_to_write():
    with pytest.raises(MachineModelError, match=r"'p10': not a preset nor a file; did you "
                                                r"mean 'p100'\?.*p100:2"):
        machine_model("p10")
    with pytest.raises(MachineModelError, match=r"'0' is not a node count; write p100:N"):
        machine_model("p100:0")
    with pytest.raises(MachineModelError, match=r"'two' is not a node count"):
        machine_model("k80:two")
    with pytest.raises(MachineFileError, match=r"machine file nope.json: cannot read it"):
        machine_model("nope.json")


def test_device_and_node_errors():
    m = machine_model("p100:2")
    with pytest.raises(MachineModelError, match=r"device 8 does not exist; it has devices "
                                                r"0..7"):
        m.device(8)
    with pytest.raises(MachineModelError, match=r"device -1 does not exist"):
        m.path(-1, 0)
    with pytest.raises(MachineModelError, match=r"node 2 does not exist; it has nodes 0..1"):
        m.devices_of_node(2)
    mixed = cluster_model("mixed", DEVICE_SPECS["A100"], [2, 3], nodes=2)
    assert mixed.num_devices == 5 and list(mixed.devices_of_node(1)) == [2, 3, 4]
    with pytest.raises(MachineModelError, match=r"nodes hold \[2, 3\] devices; use "
                                                r"devices_of_node"):
        mixed.devices_per_node
    assert str(mixed).startswith("5 devices (A100) on 2 nodes (")


# -- routes and transfers -----------------------------------------------------------------
def kinds(path):
    return [link.kind for link in path]


def test_p100_paths_and_transfer_times():
    m = machine_model("p100")
    n = 64 * MB
    assert m.path(3, 3) == () and m.transfer_time(n, 3, 3) == 0.0
    assert kinds(m.path(0, 3)) == ["nvlink"]
    assert m.transfer_time(n, 0, 3) == approx(1e-6 + n / 20e9)
    across = m.path(1, 6)
    assert kinds(across) == ["pcie", "ib", "ib", "pcie"]
    assert [l.name for l in across] == ["n0/d1-host>", "n0/host-fabric>", "n1/host-fabric<",
                                      "n1/d2-host<"]
    assert m.transfer_time(n, 1, 6) == approx(3e-6 + n / 12.5e9)   # slowest: EDR
    assert m.transfer_time(0, 1, 6) == approx(3e-6)
    # the node's one NIC is shared by all its GPUs; the two directions are separate
    assert m.path(0, 4)[1] is m.path(3, 12)[1]
    assert m.path(0, 4)[1] is not m.path(4, 0)[2]
    assert m.path(0, 4)[1].name == m.path(4, 0)[2].name[:-1] + ">"


def test_k80_pairs_on_one_switch_are_faster_than_across_switches():
    m = machine_model("k80")
    n = 16 * MB
    same, other = m.path(0, 1), m.path(0, 2)
    assert kinds(same) == ["pcie", "pcie"]
    assert kinds(other) == ["pcie", "pcie_switch", "pcie_switch", "pcie"]
    assert m.transfer_time(n, 0, 1) == approx(2e-6 + n / 15.75e9)
    assert m.transfer_time(n, 0, 2) == approx(4e-6 + n / 15.75e9)
    assert m.transfer_time(n, 0, 1) < m.transfer_time(n, 0, 2)
    # two transfers across switches share the uplink of sw0; two inside pairs share nothing
    assert {l.name for l in m.path(0, 2)} & {l.name for l in m.path(1, 3)} == {"n0/sw0-shared>",
                                                                           "n0/sw1-shared<"}
    assert not {l.name for l in m.path(0, 1)} & {l.name for l in m.path(2, 3)}
    far = m.path(0, 7)
    assert kinds(far) == ["pcie", "pcie_switch", "host", "ib", "ib", "host", "pcie_switch",
                          "pcie"]
    assert m.transfer_time(n, 0, 7) == approx(7e-6 + n / 7e9)


def test_nvswitch_nodes_use_one_nic_per_gpu():
    m = machine_model("h100:2")
    assert kinds(m.path(0, 5)) == ["nvlink", "nvlink"]
    assert m.transfer_time(MB, 0, 5) == approx(1e-6 + MB / 450e9)
    assert kinds(m.path(0, 8)) == ["pcie", "ib", "ib", "pcie"]
    assert m.transfer_time(MB, 0, 8) == approx(3e-6 + MB / 50e9)
    assert not {l.name for l in m.path(0, 8)} & {l.name for l in m.path(1, 9)}
    v = machine_model("dgx1:2")
    assert kinds(v.path(0, 7)) == ["nvlink"] and v.path(0, 7)[0].bandwidth == 25e9
    assert v.path(0, 8)[1] is v.path(1, 9)[1]          # GPUs 0 and 1 share a NIC


def test_routes_never_pass_through_a_third_device():
    spec = DEVICE_SPECS["P100"]
    chain = NodeType(("P100",) * 3, (), (LinkSpec("nvlink", ("d0", "d1"), 1e-6, 1e9),
                                         LinkSpec("nvlink", ("d1", "d2"), 1e-6, 1e9)))
    with pytest.raises(MachineModelError, match=r"no route from device 0 \(n0/d0\) to "
                                                r"device 2 \(n0/d2\); add a link"):
        MachineModel("chain", {"P100": spec}, {"c": chain}, ["c"])


# -- all-reduce ---------------------------------------------------------------------------
def test_ring_allreduce_closed_form():
    m = machine_model("p100")
    n, k = 100 * MB, 4
    assert m.allreduce_times(n, range(4))["ring"] == approx(2 * (k - 1) * 1e-6 +
                                                            2 * (k - 1) / k * n / 20e9)
    assert m.allreduce_algorithm(n, [3, 1, 2, 0, 1]) == ("ring", approx(
        6e-6 + 1.5 * n / 20e9))
    k = 16   # across 4 nodes: the slowest link is EDR, the slowest hop 3 us
    assert m.allreduce_times(n, range(16))["ring"] == approx(2 * (k - 1) * 3e-6 +
                                                             2 * (k - 1) / k * n / 12.5e9)
    assert m.allreduce_time(n, [5]) == 0.0 and m.allreduce_times(n, []) == {}
    assert m.links_of_allreduce([5]) == ()


def test_tree_counts_a_shared_port():
    # binary tree over 8 GPUs on one NVSwitch: GPU 0 receives from 1 and 2 through its one
    # port (2 messages), GPUs 1 and 2 from two children each, GPU 3 from 7
    m = machine_model("a100")
    n = 4 * MB
    levels = [2, 2, 1]
    want = 2 * sum(1e-6 + load * n / 300e9 for load in levels)
    assert m.allreduce_times(n, range(8))["tree"] == approx(want)
    assert m.allreduce_algorithm(16, range(8))[0] == "tree"        # latency: 6 rounds not 14


def test_hierarchical_closed_forms_and_choice_across_nodes():
    m = machine_model("p100")
    n = MB
    inside = 3 * (1e-6 + n / 4 / 20e9)             # ring reduce-scatter over NVLink
    across = 6 * (3e-6 + 4 * (n / 16) / 12.5e9)    # 4 rings share each node's one NIC
    assert m.allreduce_times(n, range(16))["hierarchical"] == approx(2 * inside + across)
    assert m.allreduce_algorithm(n, range(16))[0] == "hierarchical"
    assert m.allreduce_algorithm(1 << 30, range(16))[0] == "ring"    # bandwidth-optimal
    assert m.allreduce_algorithm(1024, range(16))[0] == "tree"       # latency-optimal
    a = machine_model("a100:2")
    n = 1 << 30
    inside = 7 * (1e-6 + n / 8 / 300e9)
    across = 2 * (3e-6 + (n / 16) / 25e9)          # one NIC per GPU: 8 rings in parallel
    times = a.allreduce_times(n, range(16))
    assert times["hierarchical"] == approx(2 * inside + across)
    assert a.allreduce_algorithm(n, range(16)) == ("hierarchical", approx(2 * inside + across))
    assert times["ring"] == approx(30 * 3e-6 + 30 / 16 * n / 25e9)
    assert "hierarchical" not in a.allreduce_times(n, range(8))      # one node
    assert "hierarchical" not in a.allreduce_times(n, [0, 8])        # one device per node


def test_selene_from_datasheets():
    # A100-SXM4-80GB: 312 TFLOP/s bf16 (tensor cores, dense), 19.5 fp32, 80 GiB; NVSwitch
    # 600 GB/s per GPU both ways; across nodes PCIe 4.0, HDR 200 Gb/s out and in, PCIe 4.0
    m = machine_model("selene:2")
    spec = m.device(0)
    assert (spec.peak_flops("bfloat16"), spec.peak_flops("float32")) == (312e12, 19.5e12)
    assert spec.memory_capacity == 80 << 30
    n = 1 << 30
    inside = 7 * (1e-6 + n / 8 / 300e9)
    across = 2 * (3e-6 + (n / 16) / 25e9)
    assert m.allreduce_times(n, range(16))["hierarchical"] == approx(2 * inside + across)


def test_allreduce_links_and_efficiency():
    m = machine_model("p100:2")
    inside = m.links_of_allreduce(range(4))
    assert inside and set(kinds(inside)) <= {"nvlink", "pcie"}
    assert set(m.links_of_allreduce(range(4), 1 << 30)) == {l for a in range(4) for l in
                                                            m.path(a, (a + 1) % 4)}
    both = m.links_of_allreduce(range(8))
    assert "ib" in kinds(both)
    assert set(m.links_of_allreduce(range(8), 1 << 30)) <= set(both)
    half = cluster_model("half", DEVICE_SPECS["P100"], 2, intra=("shm", 1e-6, 1e9),
                         allreduce_efficiency=0.5)
    assert half.allreduce_time(1e9, [0, 1]) == approx(2e-6 + 2 * 1e9 / 1e9)


def test_cluster_model_closed_forms():
    m = cluster_model("toy", DEVICE_SPECS["V100"], 2, intra=("shm", 2e-6, 4e9),
                      inter=("nic", 8e-6, 1e9), nodes=3)
    assert m.num_devices == 6 and kinds(m.path(0, 1)) == ["shm"]
    assert m.transfer_time(1e6, 0, 1) == approx(2e-6 + 1e6 / 4e9)
    assert kinds(m.path(1, 4)) == ["host", "nic", "nic", "host"]
    assert m.transfer_time(1e6, 1, 4) == approx(8e-6 + 1e6 / 1e9)


# -- the runtime's view -------------------------------------------------------------------
def test_taskrt_machine_has_the_same_devices():
    m = machine_model("p100:2")
    t = m.taskrt_machine()
    assert len(t) == m.num_devices == 8 and t.num_ranks == 8
    assert [d.id for d in t.devices] == list(range(8))
    assert {d.kind for d in t.devices} == {"cuda"}
    t = m.taskrt_machine(ranks_per_node=1)
    assert t.num_ranks == 2 and t.devices_of_rank(1) == [4, 5, 6, 7]
    assert [d.index for d in t.devices[4:]] == [0, 1, 2, 3]
    t = m.taskrt_machine(ranks_per_node=2)
    assert [d.rank for d in t.devices] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert len(machine_model("k80").taskrt_machine()) == 64
    with pytest.raises(MachineModelError, match=r"ranks_per_node=3 does not divide the 4 "
                                                r"devices of node 0; use a divisor of 4"):
        m.taskrt_machine(ranks_per_node=3)
    cpu = DeviceSpec("cpu", 1e11, 1e9, 5e10, 1e10, 1 << 30, 3e-6)
    t = cluster_model("cpus", cpu, 4).taskrt_machine(ranks_per_node=2)
    assert [(d.kind, d.rank, d.index) for d in t.devices] == [
        ("cpu", 0, 0), ("cpu", 0, 1), ("cpu", 1, 0), ("cpu", 1, 1)]


# -- machine files ------------------------------------------------------------------------
PRESET_NAMES = ["p100:2", "k80:3", "dgx1", "a100:2", "h100", "h200:2"]


@pytest.mark.parametrize("name", PRESET_NAMES)
@pytest.mark.parametrize("ext", [".json", ".msgpack", ".machine"])
def test_round_trip_is_exact(tmp_path, name, ext):
    m = machine_model(name)
    path = tmp_path / f"m{ext}"
    m.save(path)
    back = machine_model(str(path))
    assert back == m and str(back) == str(m)
    assert back.path(0, back.num_devices - 1) == m.path(0, m.num_devices - 1)
    again = tmp_path / f"again{ext}"
    back.save(again)
    assert again.read_bytes() == path.read_bytes()
    raw = path.read_bytes()
    data = json.loads(raw) if ext == ".json" else msgpack.unpackb(raw)
    assert data["format"] == "soapflow-machine" and (raw[:1] == b"{") == (ext == ".json")


def test_json_is_for_people_and_content_decides_the_format(tmp_path):
    m = cluster_model("toy", DEVICE_SPECS["P100"], [2, 1], intra=("shm", 4.5e-6, 3.3e9),
                      inter=("nic", 1e-5, 1.25e9), allreduce_efficiency=0.43,
                      calibration={"pingpong_intra": [[8, 4.5e-6], [1 << 22, 1.3e-3]]})
    path = tmp_path / "toy.json"
    m.save(path)
    text = path.read_text()
    assert '"fp32_flops": 1.06e13' in text and '"memory_capacity": 17179869184' in text
    assert '{"kind": "shm", "ends": ["d0", "d1"], "latency": 4.5e-6, "bandwidth": 3.3e9}' \
        in text
    assert all(len(line) <= 100 for line in text.splitlines())
    disguised = tmp_path / "toy.msgpack"
    disguised.write_text(text)
    assert load(disguised) == m
    assert json.loads(text)["calibration"] == m.calibration


def good():
    return to_dict(machine_model("p100:2"))


def problems_of(data, tmp_path, name="bad.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    with pytest.raises(MachineFileError) as e:
        load(path)
    return str(e.value)


@pytest.mark.parametrize("edit,message", [
    (lambda d: d["node_types"]["p100"]["links"][0].update(bandwith=1),
     r"node type 'p100', link 0 \(d0-d1\): unknown key 'bandwith' \(did you mean "
     r"'bandwidth'\?\); remove it or fix the spelling"),
    (lambda d: d.update(colour="red"), r"top level: unknown key 'colour'"),
    (lambda d: d["device_specs"]["P100"].update(fp23_flops=1),
     r"device spec 'P100': unknown key 'fp23_flops' \(did you mean 'fp32_flops'\?\)"),
    (lambda d: d["node_types"]["p100"]["links"][6].update(bandwidth=-5),
     r"link 6 \(d0-host\): \"bandwidth\" is -5; it must be above 0 \(bytes/s"),
    (lambda d: d["node_types"]["p100"]["links"][1].update(latency=-1e-6),
     r"\"latency\" is -1e-06; it must be at least 0 \(seconds"),
    (lambda d: d["node_types"]["p100"]["links"][2].update(latency="fast"),
     r"\"latency\" is 'fast', not a number; give seconds"),
    (lambda d: d["device_specs"]["P100"].pop("memory_capacity"),
     r"device spec 'P100': \"memory_capacity\" is missing; add it \(bytes"),
    (lambda d: d["device_specs"]["P100"].update(memory_capacity=1.5),
     r"\"memory_capacity\" is 1.5; give a whole number of bytes"),
    (lambda d: d["node_types"]["p100"]["devices"].__setitem__(3, "P1000"),
     r"node type 'p100': device d3 is a 'P1000', which has no spec in \"device_specs\" "
     r"\(did you mean 'P100'\?\); add a 'P1000' entry"),
    (lambda d: d["links"].append({"kind": "ib", "ends": ["n7/d0", "fabric"],
                                  "latency": 0, "bandwidth": 1e9}),
     r"link 0 \(ib n7/d0-fabric\): end 'n7/d0' refers to node n7, which does not exist "
     r"\(nodes n0..n1\)"),
    (lambda d: d["links"].append({"kind": "ib", "ends": ["n1/nic", "fabric"],
                                  "latency": 0, "bandwidth": 1e9}),
     r"end 'n1/nic': node n1 \(type 'p100'\) has no 'nic'"),
    (lambda d: d["node_types"]["p100"]["links"][0].update(ends=["d0", "sw9"]),
     r"link 0 \(nvlink d0-sw9\): end 'sw9' is not a device \(d0..d3\), a point of the node "
     r"\(host\) or a switch \(fabric\).*declare it under \"points\""),
    (lambda d: d["node_types"]["p100"]["links"][0].update(kind="nvlnk"),
     r"unknown link kind 'nvlnk' \(did you mean 'nvlink'\?\); use one of nvlink, pcie"),
    (lambda d: d.update(nodes=["p100", "p1000"]),
     r"node n1: unknown node type 'p1000' \(did you mean 'p100'\?\)"),
    (lambda d: d.update(nodes=[]), r"no nodes; list at least one node type"),
    (lambda d: d.update(nodes=[{"type": "p100", "count": 0}, "p100"]),
     r"nodes entry 0: expected a node type name or \{\"type\": name, \"count\": n >= 1\}"),
    (lambda d: d.update(allreduce_efficiency=0), r"\"allreduce_efficiency\" is 0; it must "
                                                 r"be above 0"),
    (lambda d: d["node_types"]["p100"]["links"].pop(),       # the NIC: nodes are cut off
     r"no route from device 0 \(n0/d0\) to device 4 \(n1/d0\); add a link"),
    (lambda d: d["node_types"]["p100"]["links"].append(
        {"kind": "pcie", "ends": ["d0", "host"], "latency": 0, "bandwidth": 1e9}),
     r"two links are named 'n0/d0-host>'; give one of them another \"name\""),
    (lambda d: d["node_types"]["p100"]["links"][0].update(ends=["d0"]),
     r"\"ends\" must be two endpoint names such as \[\"d0\", \"host\"\], got \['d0'\]"),
    (lambda d: d["node_types"]["p100"].update(points=["host", "d9"]),
     r"point 'd9' is not a valid name"),
])
def test_every_validation_error_names_the_file_and_a_fix(tmp_path, edit, message):
    data = good()
    edit(data)
    text = problems_of(data, tmp_path)
    assert text.startswith(f"machine file {tmp_path / 'bad.json'}: 1 problem:")
    assert "python -m strategy.machines p100 --save FILE" in text
    assert re.search(message, text), text


def test_every_problem_is_listed_at_once(tmp_path):
    data = good()
    data["node_types"]["p100"]["links"][0]["bandwidth"] = -1
    data["node_types"]["p100"]["devices"][0] = "Q100"
    data["links"].append({"kind": "ib", "ends": ["n9/d0", "fabric"], "latency": 0,
                          "bandwidth": 1e9, "colour": 1})
    text = problems_of(data, tmp_path)
    assert ": 4 problems:" in text
    for part in ("\"bandwidth\" is -1", "'Q100', which has no spec", "node n9",
                 "unknown key 'colour'"):
        assert part in text


def test_programmatic_models_are_checked_too():
    with pytest.raises(MachineModelError, match=r"machine 'x': 2 problems:\n  - node type "
                                                r"'n': device d0 is a 'Z1'.*\n  - .*bandwidth "
                                                r"is -1.0"):
        MachineModel("x", {}, {"n": NodeType(("Z1",), ("host",), (
            LinkSpec("pcie", ("d0", "host"), 0.0, -1.0),))}, ["n"])


@pytest.mark.parametrize("content,message", [
    (b"", r"the file is empty"),
    (b"   \n", r"the file is empty"),
    (b'{"format": "soapflow-machine", "version": 1, "nodes": [', r"not a readable JSON "
                                                                  r"machine file; it is "
                                                                  r"corrupt or truncated"),
    (msgpack.packb(good())[:-7], r"not a readable msgpack machine file; it is corrupt"),
    (pickle.dumps(good()), r"this looks like a Python pickle, which is never loaded"),
    (json.dumps({"format": "soapflow-strategy", "version": 1}).encode(),
     r"not a machine file \(no \"format\": \"soapflow-machine\" field\)"),
    (json.dumps([1, 2]).encode(), r"not a machine file"),
    (json.dumps(dict(good(), version=7)).encode(), r"format version 7, this program reads "
                                                   r"version 1"),
])
def test_unreadable_files_fail_clearly(tmp_path, content, message):
    path = tmp_path / "m.bin"
    path.write_bytes(content)
    with pytest.raises(MachineFileError, match=f"machine file {path}: " + message):
        load(path)


def test_from_dict_round_trips_every_preset_object():
    for name in PRESET_NAMES:
        data = to_dict(machine_model(name))
        assert to_dict(from_dict(copy.deepcopy(data))) == data


# -- calibration --------------------------------------------------------------------------
def plausible(model):
    spec = model.device(0)
    assert spec.kind == "cpu" if not torch.cuda.is_available() else spec.kind
    assert 1e8 < spec.fp32_flops < 1e15 and 1e6 < spec.fp16_flops < 1e15
    assert 1e8 < spec.fp64_flops < 1e15
    assert 1e8 < spec.memory_bandwidth < 1e13 and spec.memory_capacity > 1 << 28
    assert 1e-8 < spec.launch_overhead < 1e-3


def test_calibrate_without_mpi_models_one_device():
    m = calibrate_local()
    assert m.num_devices == 1 and m.name == "local"
    assert str(m) == f"1x1 {m.device(0).kind} (one device)"
    plausible(m)
    assert m.allreduce_time(MB, [0]) == 0.0


@pytest.fixture(scope="module")
def mpi_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("calibrate")
    rc, text, _ = run_mpi(2, [os.path.join(HERE, "mpi_machine.py"), str(out)], 120)
    assert rc == 0, text[-3000:]
    return out, [json.load(open(out / f"rank{r}.json")) for r in range(2)]


def test_calibrate_under_mpirun(mpi_run):
    out, ranks = mpi_run
    assert ranks[0]["model"] == ranks[1]["model"]          # every rank builds the same model
    m = load(out / "local.json")
    assert to_dict(m) == ranks[0]["model"] and load(out / "local.msgpack") == m
    assert (m.num_nodes, m.num_devices) == (1, 2) and str(m).startswith("1x2 cpu (shm ")
    plausible(m)
    (link,) = m.path(0, 1)
    assert link.kind == "shm" and 1e-7 < link.latency < 1e-2
    assert 1e8 < link.bandwidth < 1e12
    assert m.path(1, 0)[0].name != link.name
    cal = m.calibration
    assert [s for s, _ in cal["pingpong_intra"]] == [8, 1 << 16, 1 << 20, 1 << 22]
    assert all(t > 0 for _, t in cal["pingpong_intra"])
    assert 0.05 <= m.allreduce_efficiency <= 20
    size, measured, predicted = cal["allreduce"][-1]
    assert predicted == approx(measured, rel=1e-6)          # fitted at the largest size
    assert ranks[0]["allreduce_2"] == approx(measured, rel=1e-6)
    # the time it took is recorded, the same on every rank (no wall-clock bound: the
    # machine may be loaded)
    assert 0 < cal["seconds"] <= ranks[0]["seconds"]    # rank 0 timed it inside its own call
    assert m.taskrt_machine().num_ranks == 2


def test_cli_prints_and_saves(tmp_path):
    import subprocess
    path = tmp_path / "p.json"
    r = subprocess.run([sys.executable, "-m", "strategy.machines", "p100:2", "--save",
                        str(path)], capture_output=True, text=True, cwd=os.path.dirname(
                            os.path.dirname(HERE)), timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("2x4 P100 (NVLink, 100 Gb/s EDR)\n")
    assert load(path) == machine_model("p100:2")


def test_the_documented_example_file_loads_as_described():
    docs = os.path.join(os.path.dirname(os.path.dirname(HERE)), "docs", "machines.md")
    block = re.search(r"```json\n(.*?)```", open(docs).read(), re.S).group(1)
    m = from_bytes(block.encode(), "machines.md")
    assert str(m) == "2x2 A100 (PCIe, 25 Gb/s Ethernet)"
    assert [l.name for l in m.path(0, 3)] == ["n0/d0-sw>", "n0/sw-host>", "direct",
                                              "n1/sw-host<", "n1/d1-sw<"]
    assert m.path(3, 0)[2] is m.path(0, 3)[2]              # half duplex: one resource
    assert m.transfer_time(MB, 0, 3) == approx(6e-6 + MB / 12.5e9)
