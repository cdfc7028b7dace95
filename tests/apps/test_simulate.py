"""--simulate in the apps: every app (--small) predicts an iteration on presets and on a
machine file; the --json object has a real run's keys; --trace is the simulated timeline
(one track per device and link); strategies that do not fit the machine model are refused;
a model whose memory is too small reports the strategy invalid; --devices-per-rank puts
logical devices on one calibrated `local` device. The full matrix (every app on every
preset) takes minutes here: docs/simulator.md records it, the tests take a cross-section."""
import json
import math
import os
import sys
from dataclasses import replace

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from app_cases import app_module  # noqa: E402
from apps.common import run  # noqa: E402
from apps.simulate import Prediction  # noqa: E402
from parallel_ops import SGD  # noqa: E402
from parallel_ops.lowering import lower  # noqa: E402
from strategy import files  # noqa: E402
from strategy.machines import DEVICE_SPECS, cluster_model  # noqa: E402
from taskrt import Machine  # noqa: E402
from test_app_flags import KEYS, cli, fails  # noqa: E402

APPS = ("alexnet", "inception", "resnet", "rnntc", "rnnlm", "nmt", "transformer")
QUICK = ("alexnet", "rnnlm", "transformer")


@pytest.fixture(scope="module")
def machine_file(tmp_path_factory):
    """A 2-node x 2 V100 machine file (the documented JSON format)."""
    path = str(tmp_path_factory.mktemp("machines") / "two_by_two.json")
    cluster_model("two_by_two", DEVICE_SPECS["V100"], 2, nodes=2).save(path)
    return path


def simulate(name: str, machine: str, *extra) -> Prediction:
    p = run(app_module(name).APP, ["--small", "--simulate", "--machine", machine, *extra],
            out=None)
    assert isinstance(p, Prediction)
    return p


def check_prediction(p: Prediction, name: str, devices: int) -> None:
    app = app_module(name).APP
    assert len(p.machine) == devices == p.machine_model.num_devices
    assert p.config.batch_size == app.small_per_device_batch * devices
    assert p.result.valid and 0 < p.result.makespan < math.inf
    assert p.result.makespan == max(p.result.end)
    # data parallelism puts work on every device, and every device is busy for a while
    used = {n.device for n in p.graph.nodes if n.kind == "task"}
    assert used == set(range(devices))
    assert all(p.result.busy[f"device {d}"] > 0 for d in range(devices))
    assert p.samples_per_s == pytest.approx(p.config.batch_size / p.result.makespan)


@pytest.mark.parametrize("name", APPS)
def test_every_app_on_a_k80_node(name):
    check_prediction(simulate(name, "k80:1"), name, 4)


@pytest.mark.parametrize("name", QUICK)
def test_apps_on_a_machine_file(name, machine_file):
    p = simulate(name, machine_file)
    check_prediction(p, name, 4)
    assert p.machine_model.name == "two_by_two" and "two_by_two" in p.text()


@pytest.mark.parametrize("name", QUICK)
@pytest.mark.parametrize("machine,devices", [("p100", 16), ("dgx-h100", 8)])
def test_apps_on_the_paper_cluster_and_a_dgx(name, machine, devices):
    p = simulate(name, machine)
    check_prediction(p, name, devices)
    # all-reduces of data parallelism go over the model's links
    assert sum(p.communication_bytes().values()) > 0
    assert set(p.result.busy) - {f"device {d}" for d in range(devices)}


def test_json_object_has_the_keys_of_a_real_run(capsys):
    code, out, _ = cli(capsys, app_module("rnnlm").APP,
                       ["--small", "--simulate", "--machine", "dgx-h100", "--json"])
    assert code == 0
    lines = out.splitlines()
    result = json.loads(lines[-1])
    assert all(k in result for k in KEYS)
    assert result["simulated"] is True and result["valid"] is True
    assert result["devices"] == 8 and result["batch_size"] == 64
    assert result["machine"].startswith("1x8 H100") and result["machine_model"] == "dgx-h100:1"
    assert result["samples_per_s"] == pytest.approx(64 / result["iteration_time_s"])
    assert set(result["device_busy_s"]) == {f"device {d}" for d in range(8)}
    assert result["communication_bytes"]["allreduce"] > 0
    text = "\n".join(lines[:-1])
    for fragment in ("Predicted: RNNLM --small on dgx-h100:1, 1x8 H100", "iteration time", "samples/s",
                     "communication", "devices busy", "memory", "task costs"):
        assert fragment in text, fragment


def test_trace_is_the_simulated_timeline(tmp_path):
    path = str(tmp_path / "sim.json")
    p = simulate("rnnlm", "k80:1", "--trace", path)
    data = json.load(open(path))
    events = [e for e in data["traceEvents"] if e["ph"] == "X"]
    tracks = {e["tid"]: e["args"]["name"] for e in data["traceEvents"]
              if e.get("name") == "thread_name"}
    # one track per device and per link the iteration uses, each resource of the result
    assert set(tracks.values()) == set(p.result.busy)
    assert {f"device {d}" for d in range(4)} <= set(tracks.values())
    assert any(t.startswith("n0/") for t in tracks.values())        # K80 PCIe links
    for e in events:
        n = e["args"]["node"]
        assert e["ts"] == pytest.approx(1e6 * p.result.start[n])
        assert e["dur"] == pytest.approx(1e6 * (p.result.end[n] - p.result.start[n]))
    assert {e["args"]["node"] for e in events} == set(range(len(p.graph.nodes)))
    busy = {}
    for e in events:
        busy[tracks[e["tid"]]] = busy.get(tracks[e["tid"]], 0.0) + e["dur"] / 1e6
    assert busy == pytest.approx(p.result.busy)
    assert data["otherData"]["soapflow"]["simulated"] is True


def test_a_strategy_for_more_devices_is_refused(tmp_path, capsys):
    app = app_module("rnnlm").APP
    net = app.build_from_flags(["--small", "--batch-size", "64"], devices=1)
    eight = Machine.local(8)
    path = str(tmp_path / "eight.json")
    files.save(path, lower(net.model, None, eight, SGD(lr=0.1)).configs, net.model, eight)
    assert simulate("rnnlm", "dgx-h100", "--strategy", path).result.valid
    fails(capsys, app, ["--small", "--simulate", "--machine", "k80:1", "--strategy", path],
          f"strategy file {path} does not fit model 'rnnlm' on 4 devices",
          "the file was made for 8 devices; this machine has 4 (0..3), so 5 operators")


def test_memory_over_capacity_is_invalid(tmp_path, capsys):
    path = str(tmp_path / "tiny.json")
    tiny = replace(DEVICE_SPECS["V100"], memory_capacity=1 << 20)          # 1 MiB
    cluster_model("tiny", tiny, 2).save(path)
    p = simulate("alexnet", path)
    assert not p.result.valid and p.result.makespan == math.inf
    assert set(p.result.over_capacity) == {0, 1}
    assert all(p.result.memory[d] - (1 << 20) == p.result.over_capacity[d] for d in (0, 1))
    assert "INVALID: memory over capacity on 2 device(s)" in p.text()
    code, out, _ = cli(capsys, app_module("alexnet").APP,
                       ["--small", "--simulate", "--machine", path, "--json"])
    result = json.loads(out.splitlines()[-1])
    assert code == 0 and result["valid"] is False and result["iteration_time_s"] is None
    assert set(result["over_capacity_bytes"]) == {"0", "1"}


def test_logical_devices_share_a_local_device():
    p = simulate("rnnlm", "local", "--devices-per-rank", "2")
    base = p.machine_model.model
    assert len(p.machine) == 2 and base.num_devices == 1 and p.machine.num_ranks == 1
    assert p.machine_model.device(1).memory_capacity == base.device(0).memory_capacity // 2
    # both logical devices' tasks run on one compute resource, one after another
    assert p.compute_resources() == ["compute n0/d0"]
    tasks = sorted((p.result.start[n.id], p.result.end[n.id]) for n in p.graph.nodes
                   if n.kind == "task")
    assert all(e0 <= s1 + 1e-15 for (_, e0), (s1, _) in zip(tasks, tasks[1:]))
